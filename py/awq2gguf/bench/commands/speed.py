"""`bench decode` and `bench prefill`: tokens/s of the builds, interleaved ABBA, as ratios."""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass
from pathlib import Path

import click

from ...builds import get_build
from ...cli_options import RPC
from ...rpc import check_reachable
from .. import plots
from ..cli_shared import JSON, MODEL_OPTIONS, THREADS, check_machine, err, finish, log, models_for, options, progress
from ..llama_bench import RUNNERS
from ..reports import Report, report_kinds
from ..speed import paired_ratios, run_interleaved
from ..tables import Table, spread


@dataclass(kw_only=True)
class SpeedRow:
    """One build (bench.speed.BuildResult.summary): tokens/s over the repetitions, peak RSS."""
    build: str
    model: str
    model_size_mib: float
    tokens_per_s: dict  # median, min, max, samples
    ms_per_128_tokens: float
    peak_rss_mib: float


@report_kinds("decode", "prefill")
@dataclass(kw_only=True)
class SpeedReport(Report):
    runner: str
    threads: int
    reps: int
    n_prompt: int
    n_gen: int
    interrupted: bool
    builds: list[SpeedRow]           # the baseline first
    ratios: dict[str, dict]          # build -> per-repetition ratio to the baseline (median, min, max)
    rpc: tuple[str, ...] = ()        # the ggml-rpc-servers the layers were split over
    ROWS = {"builds": SpeedRow}

    @property
    def test(self) -> str:
        return f"tg{self.n_gen}" if self.kind == "decode" else f"pp{self.n_prompt}"

    def table(self) -> Table:
        decode = self.kind == "decode"
        base = self.builds[0].build
        title = (f"{self.kind} ({self.test}, {self.runner}): {self.threads} thread(s), "
                 + (f"layers over the ggml-rpc-servers {', '.join(self.rpc)}, " if self.rpc else "")
                 + f"{self.reps} interleaved reps, median (min-max)")
        headers = ["build", "model", "size MiB", "tokens/s", *(["ms / 128 tok"] if decode else []),
                   "peak RSS MiB", f"vs {base}"]
        rows = []
        for b in self.builds:
            ratio = self.ratios.get(b.build)
            rows.append([b.build, Path(b.model).name, f"{b.model_size_mib:.1f}", spread(b.tokens_per_s, ".2f"),
                         *([f"{b.ms_per_128_tokens:.0f}"] if decode else []),
                         f"{b.peak_rss_mib:.0f}", spread(ratio, ".3f") if ratio else "1"])
        return Table(title, headers, rows)


SPEED_OPTIONS = options(
    THREADS, MODEL_OPTIONS,
    click.option("--reps", type=click.IntRange(min=1), default=5, show_default=True,
                 help="Repetitions per build, interleaved ABBA."),
    click.option("--runner", type=click.Choice(sorted(RUNNERS)), default="binary", show_default=True,
                 help="binary: the build's llama-bench; python: llama-cpp-python on the build's libllama.so."),
    RPC,
    JSON,
    click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), help="Also draw an A/B bar chart (PNG)."),
)


def _speed(kind, threads, model, shape, qtype, build_names, reps, runner, rpc, as_json, plot, n_prompt, n_gen):
    if rpc and runner != "binary":
        raise click.UsageError("--rpc needs --runner binary (llama-bench)")
    check_reachable(rpc)
    busy = check_machine(threads)
    runner_of = functools.partial(RUNNERS[runner], rpc=rpc) if rpc else RUNNERS[runner]
    try:
        builds = [get_build(n) for n in build_names]
        models = models_for(builds, model, shape, qtype)
        with progress(f"{kind} runs", reps * len(builds)) as advance:
            runs, interrupted = run_interleaved(runner_of, builds, models, threads, n_prompt, n_gen, reps,
                                                on_run=advance)
    except KeyboardInterrupt:
        err.print("interrupted before one repetition of every build finished: nothing to report")
        sys.exit(130)
    report = SpeedReport(kind=kind, runner=runner, threads=threads, reps=len(runs[0].runs), n_prompt=n_prompt,
                         n_gen=n_gen, busy_warning=busy, interrupted=interrupted, rpc=rpc,
                         builds=[r.summary() for r in runs],
                         ratios={r.build: paired_ratios(r, runs[0]) for r in runs[1:]})
    finish(report, as_json)
    if plot:
        plots.speed_bars(report, plot)
        log(f"plot written to {plot}")


@click.command()
@SPEED_OPTIONS
@click.option("--n-gen", type=click.IntRange(min=1), default=128, show_default=True, help="Tokens generated per run.")
def decode(threads, model, shape, qtype, build_names, reps, runner, rpc, as_json, plot, n_gen):
    """Decode speed (tg N): tokens/s, latency per 128 tokens, peak RSS, model size."""
    _speed("decode", threads, model, shape, qtype, build_names, reps, runner, rpc, as_json, plot, 0, n_gen)


@click.command()
@SPEED_OPTIONS
@click.option("--n-prompt", type=click.IntRange(min=1), default=512, show_default=True, help="Prompt tokens per run.")
def prefill(threads, model, shape, qtype, build_names, reps, runner, rpc, as_json, plot, n_prompt):
    """Prompt processing speed (pp N): tokens/s, peak RSS, model size."""
    _speed("prefill", threads, model, shape, qtype, build_names, reps, runner, rpc, as_json, plot, n_prompt, 0)
