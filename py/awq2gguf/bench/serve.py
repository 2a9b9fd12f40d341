"""`bench serve`: awq2gguf-serve under 1, 2, 4 ... concurrent streaming clients, servers (a build and
its --parallel) interleaved.

Each client sends its requests one after another, each a streamed completion of a prompt no other
request starts with (llama-server reuses a slot's cached prefix, which would skip the prefill) and
exactly n_gen tokens (ignore_eos holds off end-of-generation). Measured per level: requests/s over
the level's wall time, and time to first token (queueing and prefill) per request.

A soak run instead sends many requests from one count of clients to one server per build, and
records each request's end (or its error) and the server's RSS every half second: requests/s over
time, errors, and how much the RSS grows after the warm-up.
"""

from __future__ import annotations

import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import openai
import psutil

from ..builds import Build
from ..proc_io import tail
from . import BenchError
from ..serve.process import served

FILLER = ("the quick brown fox jumps over the lazy dog while a small bird sings in the old tree by the river "
          "and children play in the warm sun of a long summer afternoon").split()


def prompt(i: int, words: int) -> str:
    """A prompt of about `words` words whose first word is unique to i."""
    return " ".join([f"Request{i}:", *(FILLER[j % len(FILLER)] for j in range(words - 1))])


def _streamed_request(api: openai.OpenAI, i: int, prompt_words: int, n_gen: int) -> float:
    """Request i streamed to its end; its time to first token in seconds."""
    start = time.perf_counter()
    ttft = None
    stream = api.completions.create(model="m", prompt=prompt(i, prompt_words), max_tokens=n_gen, temperature=0,
                                    stream=True, extra_body={"ignore_eos": True})
    for _ in stream:
        ttft = ttft or time.perf_counter() - start
    return ttft


def _api(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=600)


def load_level(url: str, clients: int, requests_per_client: int, prompt_words: int, n_gen: int,
               first_id: int) -> dict:
    api = _api(url)

    def client(c: int) -> list[float]:
        return [_streamed_request(api, first_id + c * requests_per_client + r, prompt_words, n_gen)
                for r in range(requests_per_client)]

    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        ttfts = [t for per_client in pool.map(client, range(clients)) for t in per_client]
    wall = time.perf_counter() - start
    return {"clients": clients, "requests": len(ttfts), "requests_per_s": len(ttfts) / wall,
            "ttft_ms_median": 1000 * statistics.median(ttfts), "ttft_ms_max": 1000 * max(ttfts)}


def server_label(build: Build, parallel: int) -> str:
    return f"{build.name}, {parallel} at once"


def bench_served(model: Path, build: Build, threads: int, parallel: int, queue: int):
    """awq2gguf-serve as the benchmarks run it: the API alone (the chat page is not what they measure)."""
    return served(model, build.name, threads, "--parallel", str(parallel), "--queue", str(queue), "--no-page")


def run_serve_bench(servers: list[tuple[Build, int]], model: Path, threads: int, levels: tuple[int, ...], reps: int,
                    requests_per_client: int, prompt_words: int, n_gen: int,
                    on_level: Callable[[], None] = lambda: None) -> dict[str, list[list[dict]]]:
    """{server label: [one list of level results per repetition]} for each (build, --parallel), in
    ABBA order; each repetition starts each server afresh. Prompts never repeat within a server's life."""
    out = {server_label(*s): [] for s in servers}
    for rep in range(reps):
        for build, parallel in servers if rep % 2 == 0 else servers[::-1]:
            with bench_served(model, build, threads, parallel, max(parallel, *levels)) as server:
                results, first_id = [], 0
                for clients in levels:
                    try:
                        results.append(load_level(server.url, clients, requests_per_client, prompt_words, n_gen,
                                                  first_id))
                    except openai.OpenAIError as e:
                        raise BenchError(f"a request to {server_label(build, parallel)} at {clients} clients failed: "
                                         f"{e}; the server's last lines:\n{tail(server.output())}") from None
                    first_id += clients * requests_per_client
                    on_level()
            out[server_label(build, parallel)].append(results)
    return out


def summarise(runs: dict[str, list[list[dict]]], levels: tuple[int, ...]) -> list[dict]:
    """One row per server and level: medians over repetitions, and requests/s over the first
    server's, paired per repetition."""
    base = next(iter(runs))
    rows = []
    for build, reps in runs.items():
        for i, clients in enumerate(levels):
            rps = [rep[i]["requests_per_s"] for rep in reps]
            ratios = [r / rep[i]["requests_per_s"] for r, rep in zip(rps, runs[base])]
            rows.append({"build": build, "clients": clients, "requests": reps[0][i]["requests"],
                         "requests_per_s": statistics.median(rps),
                         "ttft_ms_median": statistics.median(rep[i]["ttft_ms_median"] for rep in reps),
                         "ttft_ms_max": max(rep[i]["ttft_ms_max"] for rep in reps),
                         "ratio": {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}})
    return rows


def soak(url: str, pid: int, clients: int, requests: int, prompt_words: int, n_gen: int,
         on_request: Callable[[], None] = lambda: None) -> dict:
    """`requests` requests shared by `clients` clients, each sending one after another. Returns each
    request's end in seconds from the start, the errors (as text) and (time, RSS bytes of the server
    and its llama-server) samples."""
    api, server = _api(url), psutil.Process(pid)
    ends, errors, rss = [], [], []
    next_id = iter(range(requests))
    lock, stop = threading.Lock(), threading.Event()
    start = time.perf_counter()

    def sample():
        while True:
            rss.append((time.perf_counter() - start, sum(p.memory_info().rss for p in (server, *server.children()))))
            if stop.wait(0.5):
                return

    def client(_c: int):
        while True:
            with lock:
                i = next(next_id, None)
            if i is None:
                return
            try:
                _streamed_request(api, i, prompt_words, n_gen)
            except openai.OpenAIError as e:
                errors.append(f"request {i}: {type(e).__name__}: {e}")
            ends.append(time.perf_counter() - start)
            on_request()

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(client, range(clients)))
    stop.set()
    sampler.join()
    return {"ends_s": sorted(ends), "errors": errors, "rss": rss}


def summarise_soak(run: dict, windows: int, warm_up: float) -> dict:
    """Requests/s in `windows` equal spans of the run, and the server's RSS growth from the end of the
    warm-up (the first `warm_up` share of the requests) to the largest RSS after it."""
    ends, rss = run["ends_s"], run["rss"]
    wall = ends[-1]
    edges = [wall * k / windows for k in range(windows + 1)]
    per_window = [sum(a < t <= b for t in ends) / (b - a) for a, b in zip(edges, edges[1:])]
    warm_s = ends[max(0, int(len(ends) * warm_up) - 1)]
    after = [b for t, b in rss if t >= warm_s] or [rss[-1][1]]
    at_warm = after[0]
    return {"requests": len(ends), "errors": len(run["errors"]), "wall_s": wall,
            "requests_per_s": len(ends) / wall, "requests_per_s_windows": per_window,
            "rss_warm_mib": at_warm / 2**20, "rss_max_mib": max(after) / 2**20,
            "rss_growth": max(after) / at_warm - 1}
