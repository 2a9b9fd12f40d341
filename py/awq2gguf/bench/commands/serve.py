"""`bench serve`: awq2gguf-serve under concurrent streaming clients, builds on the same file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import click

from ...builds import get_build
from ...serve.cli import DEFAULT_PARALLEL
from ..serve import bench_served, run_serve_bench, server_label, soak, summarise, summarise_soak
from ..cli_shared import BUILDS, JSON, QTYPE, SHAPE, THREADS, check_machine, comma_ints, finish, log, progress
from ..models import quantized_by, synthetic_f16
from ..reports import Report, report_kinds
from ..tables import Table, spread


def _parse_levels(_ctx, _param, value: str) -> tuple[int, ...]:
    levels = comma_ints(value)
    if min(levels) < 1:
        raise click.BadParameter("client counts are 1 or more")
    return levels


@dataclass(kw_only=True)
class ServeRow:
    """One server (a build and its --parallel) at one client count, medians over the repetitions."""
    build: str  # the server's label
    clients: int
    requests: int
    requests_per_s: float
    ttft_ms_median: float
    ttft_ms_max: float  # the largest over the repetitions
    ratio: dict  # requests/s over the first server's, paired per repetition: median, min, max


@report_kinds("serve")
@dataclass(kw_only=True)
class ServeReport(Report):
    threads: int
    model: str
    reps: int
    n_gen: int
    prompt_words: int
    requests_per_client: int
    rows: list[ServeRow]
    runs: dict[str, list]  # server -> every repetition as measured
    ROWS = {"rows": ServeRow}

    def table(self) -> Table:
        base = self.rows[0].build
        title = (f"awq2gguf-serve, {Path(self.model).name}: streamed completions of ~{self.prompt_words} words "
                 f"+ {self.n_gen} tokens, {self.requests_per_client} per client, {self.threads} thread(s), "
                 f"{self.reps} interleaved reps, median (min-max); a server is a build and its --parallel")
        headers = ["server", "clients", "requests", "requests/s", "answer tokens/s", "first token ms (median)",
                   "first token ms (max)", f"requests/s vs {base}"]
        rows = [[r.build, str(r.clients), str(r.requests), f"{r.requests_per_s:.3f}",
                 f"{r.requests_per_s * self.n_gen:.1f}", f"{r.ttft_ms_median:.0f}", f"{r.ttft_ms_max:.0f}",
                 "1" if r.build == base else spread(r.ratio, ".3f")] for r in self.rows]
        return Table(title, headers, rows)


SOAK_WINDOWS = 10
SOAK_WARM_UP = 0.1  # share of the requests before the RSS baseline


@dataclass(kw_only=True)
class SoakRow:
    """One server's soak: requests, errors, requests/s over the run and in each window, its RSS."""
    build: str  # the server's label
    requests: int
    errors: int
    wall_s: float
    requests_per_s: float
    requests_per_s_windows: list[float]
    rss_warm_mib: float  # at the end of the warm-up
    rss_max_mib: float   # the largest after it
    rss_growth: float


@report_kinds("serve-soak")
@dataclass(kw_only=True)
class SoakReport(Report):
    threads: int
    model: str
    clients: int
    n_gen: int
    prompt_words: int
    rows: list[SoakRow]
    errors: dict[str, list[str]]  # server -> the first errors' text
    runs: dict[str, dict]  # server -> each request's end, server RSS samples
    ROWS = {"rows": SoakRow}

    def table(self) -> Table:
        title = (f"awq2gguf-serve soak, {Path(self.model).name}: {self.clients} clients streaming completions of "
                 f"~{self.prompt_words} words + {self.n_gen} tokens, {self.threads} thread(s); RSS growth from the "
                 f"end of the first {SOAK_WARM_UP:.0%} of the requests to the largest after it")
        headers = ["server", "requests", "errors", "requests/s", f"requests/s in each {100 // SOAK_WINDOWS}% of the run",
                   "RSS after warm-up MiB", "RSS max MiB", "RSS growth"]
        rows = [[r.build, str(r.requests), str(r.errors), f"{r.requests_per_s:.2f}",
                 " ".join(f"{x:.2f}" for x in r.requests_per_s_windows), f"{r.rss_warm_mib:.0f}",
                 f"{r.rss_max_mib:.0f}", f"{r.rss_growth:+.1%}"] for r in self.rows]
        return Table(title, headers, rows)


@click.command()
@THREADS
@click.option("--model", "-m", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="GGUF every build serves. Default: the synthetic --shape model in --qtype, quantized once by "
                   "the patched build (the same file for every build).")
@SHAPE
@QTYPE
@BUILDS
@click.option("--clients", "levels", default="1,2,4", show_default=True, callback=_parse_levels,
              help="Concurrent clients, comma-separated: one measurement per count.")
@click.option("--parallel", "parallels", default=str(DEFAULT_PARALLEL), show_default=True, callback=_parse_levels,
              help="awq2gguf-serve's --parallel, comma-separated: each build is served with each (1: one "
                   "answer at a time).")
@click.option("--requests", "requests_per_client", type=click.IntRange(min=1), default=4, show_default=True,
              help="Requests each client sends, one after another.")
@click.option("--prompt-words", type=click.IntRange(min=2), default=100, show_default=True)
@click.option("--n-gen", type=click.IntRange(min=1), default=64, show_default=True, help="Tokens per answer.")
@click.option("--reps", type=click.IntRange(min=1), default=3, show_default=True,
              help="Repetitions per build, interleaved ABBA, each on a fresh server.")
@click.option("--soak", "soak_n", type=click.IntRange(min=1), metavar="N",
              help="Instead: N requests from the largest --clients count to each server (a build and its "
                   "--parallel): requests/s over time, errors and the server's RSS growth after warm-up.")
@JSON
def serve(threads, model, shape, qtype, build_names, levels, parallels, requests_per_client, prompt_words, n_gen, reps,
          soak_n, as_json):
    """awq2gguf-serve under load: requests/s and time to first token at each client count, streamed
    completions through the OpenAI API, builds compared on the same file."""
    busy = check_machine(threads)
    builds = [get_build(n) for n in build_names]
    model = model or quantized_by(get_build("patched"), synthetic_f16(shape, log), qtype, log)
    if soak_n:
        # (no more slots than clients: the queue holds one request per client)
        servers = list(dict.fromkeys((b, min(p, max(levels))) for b in builds for p in parallels))
        runs = {}
        with progress("soak requests", soak_n * len(servers)) as advance:
            for build, parallel in servers:
                with bench_served(model, build, threads, parallel, max(levels)) as server:
                    runs[server_label(build, parallel)] = soak(server.url, server.process.pid, max(levels), soak_n,
                                                               prompt_words, n_gen, on_request=advance)
        report = SoakReport(kind="serve-soak", threads=threads, model=str(model), clients=max(levels), n_gen=n_gen,
                            prompt_words=prompt_words, busy_warning=busy, errors={b: r["errors"][:20] for b, r in runs.items()},
                            rows=[{"build": b, **summarise_soak(r, SOAK_WINDOWS, SOAK_WARM_UP)} for b, r in runs.items()],
                            runs={b: {"ends_s": r["ends_s"], "rss": r["rss"]} for b, r in runs.items()})
        return finish(report, as_json)
    servers = [(b, p) for b in builds for p in parallels]
    with progress("serving load levels", reps * len(servers) * len(levels)) as advance:
        runs = run_serve_bench(servers, model, threads, levels, reps, requests_per_client, prompt_words, n_gen,
                               on_level=advance)
    report = ServeReport(kind="serve", threads=threads, model=str(model), reps=reps, n_gen=n_gen,
                         prompt_words=prompt_words, requests_per_client=requests_per_client, busy_warning=busy,
                         rows=summarise(runs, levels), runs=runs)
    finish(report, as_json)
