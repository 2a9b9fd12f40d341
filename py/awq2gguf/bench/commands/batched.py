"""`bench batched`: decode tokens/s of several streams at once (llama-batched-bench), the builds
interleaved ABBA at each stream count, as ratios."""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass
from pathlib import Path

import click

from ...builds import get_build
from ...cli_options import comma_ints
from ..batched_bench import run_batched_bench
from ..cli_shared import JSON, MODEL_OPTIONS, THREADS, check_machine, err, finish, models_for, progress
from ..reports import Report, report_kinds
from ..speed import paired_ratios, run_interleaved
from ..tables import Table, spread


@dataclass(kw_only=True)
class BatchedRow:
    """One build at one stream count: decode tokens/s summed over the streams, its ratio to the first build."""
    build: str
    model: str
    streams: int
    tokens_per_s: dict   # median, min, max, samples
    peak_rss_mib: float
    ratio: dict | None   # per repetition, to the first build's run beside it; none for the first build


def _parse_streams(_ctx, _param, value: str) -> tuple[int, ...]:
    streams = comma_ints(value, "stream counts")
    if not streams or any(n < 1 for n in streams) or len(set(streams)) != len(streams):
        raise click.BadParameter(f"{value!r}: distinct stream counts of 1 or more")
    return streams


@report_kinds("batched")
@dataclass(kw_only=True)
class BatchedReport(Report):
    threads: int
    reps: int
    n_prompt: int
    n_gen: int
    interrupted: bool
    rows: list[BatchedRow]  # by stream count, the builds in the order given
    ROWS = {"rows": BatchedRow}

    def table(self) -> Table:
        base = self.rows[0].build
        title = (f"batched decode (llama-batched-bench, {self.n_prompt}-token prompts, {self.n_gen} steps): "
                 f"{self.threads} thread(s), {self.reps} interleaved reps, median (min-max)")
        headers = ["streams", "build", "model", "decode t/s, all streams", "peak RSS MiB", f"vs {base}"]
        rows = [[str(r.streams), r.build, Path(r.model).name, spread(r.tokens_per_s, ".2f"), f"{r.peak_rss_mib:.0f}",
                 spread(r.ratio, ".3f") if r.ratio else "1"] for r in self.rows]
        return Table(title, headers, rows)


@click.command()
@THREADS
@MODEL_OPTIONS
@click.option("--streams", default="1,2,4,8", show_default=True, callback=_parse_streams,
              help="Comma-separated numbers of streams decoding at once.")
@click.option("--reps", type=click.IntRange(min=1), default=3, show_default=True,
              help="Repetitions per build and stream count, interleaved ABBA.")
@click.option("--n-prompt", type=click.IntRange(min=1), default=16, show_default=True, help="Prompt tokens per stream.")
@click.option("--n-gen", type=click.IntRange(min=1), default=32, show_default=True, help="Decode steps.")
@JSON
def batched(threads, model, shape, qtype, build_names, streams, reps, n_prompt, n_gen, as_json):
    """Batched decode (llama-batched-bench): tokens/s summed over 1, 2, 4, 8 streams decoding at once."""
    busy = check_machine(threads)
    builds = [get_build(n) for n in build_names]
    models = models_for(builds, model, shape, qtype)
    rows, interrupted, done_reps = [], False, reps
    try:
        with progress("batched runs", reps * len(builds) * len(streams)) as advance:
            for n in streams:
                runs, interrupted = run_interleaved(functools.partial(run_batched_bench, streams=n), builds, models,
                                                    threads, n_prompt, n_gen, reps, on_run=advance)
                done_reps = min(done_reps, len(runs[0].runs))
                for r in runs:
                    summary = r.summary()
                    rows.append({"build": r.build, "model": str(r.model), "streams": n,
                                 "tokens_per_s": summary["tokens_per_s"], "peak_rss_mib": summary["peak_rss_mib"],
                                 "ratio": paired_ratios(r, runs[0]) if r is not runs[0] else None})
                if interrupted:
                    break
    except KeyboardInterrupt:
        if not rows:
            err.print("interrupted before one repetition of every build finished: nothing to report")
            sys.exit(130)
        interrupted = True
    report = BatchedReport(kind="batched", threads=threads, reps=done_reps, n_prompt=n_prompt, n_gen=n_gen,
                           busy_warning=busy, interrupted=interrupted, rows=rows)
    finish(report, as_json)
