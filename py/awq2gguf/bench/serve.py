"""`bench serve`: awq2gguf-serve under 1, 2, 4 ... concurrent streaming clients, servers (a build and
its --parallel, prompt cache and speculation) interleaved.

Each client sends its requests one after another, each a streamed completion of a prompt no other
request starts with (llama-server reuses a slot's cached prefix, which would skip the prefill) and
exactly n_gen tokens (ignore_eos holds off end-of-generation). Measured per level: requests/s over
the level's wall time, and time to first token (queueing and prefill) per request; then the same
clients ask for as many embeddings of such prompts: embeddings/s (the embedding engine's speed).

A chat run instead holds several conversations of many turns, one turn at a time in turn: more
conversations than slots, so a turn finds its history in its slot only through the prompt cache.
Measured: each turn's time to first token and the prompt tokens llama-server evaluated.

A speculation run sends one stream of greedy chat requests of two kinds, code edits (the answer
rewrites a given function) and questions: decode tokens/s and the share of drafted tokens accepted,
as llama-server times them, and whether each answer is its build's without speculation.

A soak run instead sends many requests from one count of clients to one server per build (every
SOAK_EMBED_EVERY-th an embedding request, the others streamed completions), and records each
request's end (or its error) and the server's RSS every half second: requests/s over time, errors,
and how much the RSS grows after the warm-up.
"""

from __future__ import annotations

import statistics
import threading
import time
from contextlib import contextmanager
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, NamedTuple

import openai
import psutil

from ..builds import Build
from ..errors import tail
from ..serve.options import DEFAULT_PROMPT_CACHE_MIB
from ..serve.process import CLIENT_ALIAS, Served, served
from . import BenchError
from .interleave import abba
from .serve_prompts import CHAT_OPENERS, FOLLOW_UPS, SPECULATION_PROMPTS
from .tables import median_range

FILLER = ("the quick brown fox jumps over the lazy dog while a small bird sings in the old tree by the river "
          "and children play in the warm sun of a long summer afternoon").split()


def prompt(i: int, words: int) -> str:
    """A prompt of about `words` words whose first word is unique to i."""
    return " ".join([f"Request{i}:", *(FILLER[j % len(FILLER)] for j in range(words - 1))])


def _streamed_request(api: openai.OpenAI, i: int, prompt_words: int, n_gen: int) -> float:
    """Request i streamed to its end; its time to first token in seconds."""
    start = time.perf_counter()
    ttft = None
    stream = api.completions.create(model=CLIENT_ALIAS, prompt=prompt(i, prompt_words), max_tokens=n_gen, temperature=0,
                                    stream=True, extra_body={"ignore_eos": True})
    for _ in stream:
        ttft = ttft or time.perf_counter() - start
    return ttft


def _embedding_request(api: openai.OpenAI, i: int, prompt_words: int) -> None:
    api.embeddings.create(model=CLIENT_ALIAS, input=prompt(i, prompt_words))


SOAK_EMBED_EVERY = 4


def _api(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=600)


def load_level(url: str, clients: int, requests_per_client: int, prompt_words: int, n_gen: int,
               first_id: int) -> dict:
    api = _api(url)

    def client(c: int) -> list[float]:
        return [_streamed_request(api, first_id + c * requests_per_client + r, prompt_words, n_gen)
                for r in range(requests_per_client)]

    def embedder(c: int) -> None:
        for r in range(requests_per_client):
            _embedding_request(api, first_id + c * requests_per_client + r, prompt_words)

    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        ttfts = [t for per_client in pool.map(client, range(clients)) for t in per_client]
    wall = time.perf_counter() - start
    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(embedder, range(clients)))
    embed_wall = time.perf_counter() - start
    return {"clients": clients, "requests": len(ttfts), "requests_per_s": len(ttfts) / wall,
            "ttft_ms_median": 1000 * statistics.median(ttfts), "ttft_ms_max": 1000 * max(ttfts),
            "embeddings_per_s": len(ttfts) / embed_wall}


class ServerConfig(NamedTuple):
    """One awq2gguf-serve configuration measured: a build and the options that change its speed."""
    build: Build
    parallel: int
    prompt_cache_mib: int
    spec: str = "none"
    draft: Path | None = None

    def label(self) -> str:
        """Build and --parallel, then whatever is not awq2gguf-serve's default."""
        return ", ".join([self.build.name, f"{self.parallel} at once",
                          *([f"prompt cache {self.prompt_cache_mib} MiB"]
                            if self.prompt_cache_mib != DEFAULT_PROMPT_CACHE_MIB else []),
                          *([f"spec {self.spec}"] if self.spec != "none" else []),
                          *([f"draft {self.draft.name}"] if self.draft else [])])


def bench_served(model: Path, config: ServerConfig, threads: int, queue: int):
    """awq2gguf-serve as the benchmarks run it: the API alone (the chat page is not what they measure)."""
    return served(model, config.build.name, threads, "--parallel", str(config.parallel), "--queue", str(queue),
                  "--no-page", "--prompt-cache", str(config.prompt_cache_mib), "--spec", config.spec,
                  *(["--draft", str(config.draft)] if config.draft else []))


def on_servers(servers: list[ServerConfig], reps: int, model: Path, threads: int, queue: int,
               measure: Callable[[Served], object]) -> dict[str, list]:
    """{server label: [measure(server) per repetition]}, the servers in ABBA order, each repetition on
    a fresh server."""
    runs = {s.label(): [] for s in servers}
    for order in abba(servers, reps):
        for config in order:
            with bench_served(model, config, threads, queue) as server:
                runs[config.label()].append(measure(server))
    return runs


def load_levels(server: Served, levels: tuple[int, ...], requests_per_client: int, prompt_words: int, n_gen: int,
                on_level: Callable[[], None]) -> list[dict]:
    """Each client count in turn; prompts never repeat within a server's life."""
    results, first_id = [], 0
    for clients in levels:
        with _failing_as_bench_error(server, f"{clients} clients"):
            results.append(load_level(server.url, clients, requests_per_client, prompt_words, n_gen, first_id))
        first_id += clients * requests_per_client
        on_level()
    return results


@contextmanager
def _failing_as_bench_error(server, what: str):
    try:
        yield
    except openai.OpenAIError as e:
        raise BenchError(f"a request at {what} failed: {e}; the server's last lines:\n"
                         f"{tail(server.output())}") from None


def _timed_chat(api: openai.OpenAI, messages: list[dict], max_tokens: int) -> tuple[str, dict, float]:
    """A greedy chat completion, streamed: (answer, llama-server's timings, time to first token in s)."""
    start, ttft, parts, timings = time.perf_counter(), None, [], {}
    stream = api.chat.completions.create(model=CLIENT_ALIAS, messages=messages, max_tokens=max_tokens, temperature=0,
                                         stream=True)
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            ttft = ttft or time.perf_counter() - start
            parts.append(chunk.choices[0].delta.content)
        timings = (chunk.model_extra or {}).get("timings", timings)
    return "".join(parts), timings, ttft or time.perf_counter() - start


def chat_turns(server: Served, conversations: int, turns: int, max_tokens: int,
               on_turn: Callable[[], None]) -> list[dict]:
    """`conversations` chats of `turns` turns, their turns taken in turn (all first turns, then all
    second ...). Each turn: conversation, turn, time to first token, prompt tokens evaluated, prompt
    tokens restored from a cache."""
    api, histories, out = _api(server.url), [[] for _ in range(conversations)], []
    for turn in range(turns):
        for c, history in enumerate(histories):
            history.append({"role": "user", "content": f"{CHAT_OPENERS[c % len(CHAT_OPENERS)]} (conversation {c})"
                            if turn == 0 else FOLLOW_UPS[turn % len(FOLLOW_UPS)]})
            with _failing_as_bench_error(server, f"turn {turn + 1} of conversation {c}"):
                answer, timings, ttft = _timed_chat(api, history, max_tokens)
            history.append({"role": "assistant", "content": answer})
            out.append({"conversation": c, "turn": turn + 1, "ttft_ms": 1000 * ttft,
                        "prompt_n": timings.get("prompt_n"), "cache_n": timings.get("cache_n")})
            on_turn()
    return out


def speculation_run(server: Served, max_tokens: int, on_request: Callable[[], None]) -> dict[str, list[dict]]:
    """Each prompt of each kind once, greedy: {kind: [{answer, timings}]}."""
    api = _api(server.url)
    out = {}
    for kind, prompts in SPECULATION_PROMPTS.items():
        out[kind] = []
        for text in prompts:
            with _failing_as_bench_error(server, f"a {kind} prompt"):
                answer, timings, _ = _timed_chat(api, [{"role": "user", "content": text}], max_tokens)
            out[kind].append({"answer": answer, "timings": timings})
            on_request()
    return out


def summarise_chat(runs: dict[str, list[list[dict]]]) -> list[dict]:
    base = next(iter(runs))
    rows = []
    for label, reps in runs.items():
        turns = max(t["turn"] for t in reps[0])

        def at(turn, field, of=reps):
            return [t[field] for rep in of for t in rep if t["turn"] == turn]

        ratios = [statistics.median(at(turns, "ttft_ms", [rep])) / statistics.median(at(turns, "ttft_ms", [b]))
                  for rep, b in zip(reps, runs[base])]
        rows.append({"build": label, "conversations": len(at(1, "turn", reps[:1])), "turns": turns,
                     "ttft_ms_first": statistics.median(at(1, "ttft_ms")),
                     "ttft_ms_last": statistics.median(at(turns, "ttft_ms")),
                     "prompt_tokens_last": statistics.median(at(turns, "prompt_n")),
                     "cached_tokens_last": statistics.median(at(turns, "cache_n")),
                     "ratio_last": median_range(ratios)})
    return rows


def summarise_speculation(runs: dict[str, list[dict]], plain_of: dict[str, str]) -> list[dict]:
    """One row per server and prompt kind: decode tokens/s (the medians over repetitions of all answers'
    tokens over their decode time), its ratio to the first server's, paired per repetition, the
    share of drafted tokens accepted, and how many answers differ from those of `plain_of[server]`
    (the same build without speculation) in the same repetition."""
    base = next(iter(runs))
    rows = []
    for label, reps in runs.items():
        for kind in SPECULATION_PROMPTS:
            speeds = [_decode_speed(rep[kind]) for rep in reps]
            ratios = [s / _decode_speed(b[kind]) for s, b in zip(speeds, runs[base])]
            drafted = sum(a["timings"].get("draft_n", 0) for rep in reps for a in rep[kind])
            accepted = sum(a["timings"].get("draft_n_accepted", 0) for rep in reps for a in rep[kind])
            differ = sum(a["answer"] != b["answer"] for rep, plain in zip(reps, runs[plain_of[label]])
                         for a, b in zip(rep[kind], plain[kind]))
            rows.append({"build": label, "prompts": kind, "answers": len(reps[0][kind]),
                         "tokens": sum(a["timings"]["predicted_n"] for a in reps[0][kind]),
                         "decode_tokens_per_s": statistics.median(speeds),
                         "ratio": median_range(ratios),
                         "drafted": drafted, "acceptance": accepted / drafted if drafted else None,
                         "answers_differing": differ})
    return rows


def _decode_speed(answers: list[dict]) -> float:
    return (sum(a["timings"]["predicted_n"] for a in answers) /
            sum(a["timings"]["predicted_ms"] for a in answers) * 1000)


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
                         "embeddings_per_s": statistics.median(rep[i]["embeddings_per_s"] for rep in reps),
                         "ratio": median_range(ratios)})
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
                if i % SOAK_EMBED_EVERY == SOAK_EMBED_EVERY - 1:
                    _embedding_request(api, i, prompt_words)
                else:
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
    warm-up (the first `warm_up` share of the requests) to the largest RSS after it, and over the
    second half of the requests (once bounded caches have filled, a leak's mark)."""
    ends, rss = run["ends_s"], run["rss"]
    wall = ends[-1]
    edges = [wall * k / windows for k in range(windows + 1)]
    per_window = [sum(a < t <= b for t in ends) / (b - a) for a, b in zip(edges, edges[1:])]
    warm_s = ends[max(0, int(len(ends) * warm_up) - 1)]
    after = [b for t, b in rss if t >= warm_s] or [rss[-1][1]]
    at_warm = after[0]
    late = [b for t, b in rss if t >= ends[len(ends) // 2 - 1]] or [rss[-1][1]]
    return {"requests": len(ends), "errors": len(run["errors"]), "wall_s": wall,
            "requests_per_s": len(ends) / wall, "requests_per_s_windows": per_window,
            "rss_warm_mib": at_warm / 2**20, "rss_max_mib": max(after) / 2**20,
            "rss_growth": max(after) / at_warm - 1, "rss_growth_late": max(late) / late[0] - 1}
