"""`bench`: A/B measurements of the stock and patched builds, run interleaved in one invocation."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from ..builds import BUILD_NAMES, BuildMissing, get_build
from ..quantize import QuantizeError
from ..synthetic import DEFAULT_SHAPE, SHAPES
from .llama_bench import BenchError
from .machine import busy_warning, physical_cores, threads_warning
from .models import quantized_by, synthetic_f16
from .speed import paired_ratios, run_interleaved

err = Console(stderr=True)


def _parse_builds(_ctx, _param, value: str) -> list[str]:
    names = [n.strip() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in BUILD_NAMES]
    if unknown or not names:
        raise click.BadParameter(f"unknown build(s) {', '.join(unknown) or '(none)'}; "
                                 f"choose from {', '.join(BUILD_NAMES)}")
    return names


def speed_options(f):
    options = [
        click.option("--threads", "-t", type=click.IntRange(min=1), default=physical_cores, show_default="physical cores",
                     help="Threads for every run."),
        click.option("--model", "-m", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                     help="GGUF to run on every build. Default: the synthetic --shape model, quantized to "
                          "--qtype by each build's own llama-quantize (so each build runs the file it makes)."),
        click.option("--shape", type=click.Choice(sorted(SHAPES)), default=DEFAULT_SHAPE, show_default=True,
                     help="Synthetic model shape used when --model is not given."),
        click.option("--qtype", default="Q4_0", show_default=True,
                     help="Quantization of the synthetic model."),
        click.option("--builds", "builds", default="stock,patched", show_default=True, callback=_parse_builds,
                     help="Comma-separated builds to compare; ratios are against the first."),
        click.option("--reps", type=click.IntRange(min=1), default=5, show_default=True,
                     help="Repetitions per build, interleaved ABBA."),
        click.option("--json", "as_json", is_flag=True, help="Print results as JSON on stdout."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main():
    """Measure the stock and patched llama.cpp builds against each other.

    Every command runs the builds interleaved in one invocation and reports the ratio
    against the first build, since absolute timings on a shared machine are noisy.
    """


@main.command()
@speed_options
@click.option("--n-gen", type=click.IntRange(min=1), default=128, show_default=True, help="Tokens generated per run.")
def decode(threads, model, shape, qtype, builds, reps, as_json, n_gen):
    """Decode speed (tg N): tokens/s, latency per N tokens, peak RSS, model size."""
    _speed("decode", threads, model, shape, qtype, builds, reps, as_json, n_prompt=0, n_gen=n_gen)


@main.command()
@speed_options
@click.option("--n-prompt", type=click.IntRange(min=1), default=512, show_default=True, help="Prompt tokens per run.")
def prefill(threads, model, shape, qtype, builds, reps, as_json, n_prompt):
    """Prompt processing speed (pp N): tokens/s, peak RSS, model size."""
    _speed("prefill", threads, model, shape, qtype, builds, reps, as_json, n_prompt=n_prompt, n_gen=0)


def _speed(kind, threads, model, shape, qtype, build_names, reps, as_json, n_prompt, n_gen):
    for warning in (threads_warning(threads), busy_warning(threads)):
        if warning:
            err.print(f"[yellow]warning:[/] {warning}")
    try:
        builds = [get_build(n) for n in build_names]
        log = lambda msg: err.print(f"[dim]{msg}[/]")
        if model:
            models = {b.name: model for b in builds}
        else:
            src = synthetic_f16(shape, log)
            models = {b.name: quantized_by(b, src, qtype, log) for b in builds}
        with Progress(TextColumn(f"{kind} runs"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                      console=err, transient=True) as progress:
            task = progress.add_task(kind, total=reps * len(builds))
            results = run_interleaved(builds, models, threads, n_prompt, n_gen, reps,
                                      on_run=lambda: progress.advance(task))
    except (BuildMissing, BenchError, QuantizeError) as e:
        raise click.ClickException(str(e)) from e
    except KeyboardInterrupt:
        err.print("interrupted: no complete A/B result to report")
        sys.exit(130)

    report = {
        "kind": kind, "threads": threads, "reps": reps, "n_prompt": n_prompt, "n_gen": n_gen,
        "builds": [r.summary() for r in results],
        "ratios": {r.build: paired_ratios(r, results[0]) for r in results[1:]},
    }
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        _print_table(report, results[0].build)


def _print_table(report: dict, base: str) -> None:
    decode = report["kind"] == "decode"
    title = (f"{report['kind']}: " + (f"tg{report['n_gen']}" if decode else f"pp{report['n_prompt']}") +
             f", {report['threads']} thread(s), {report['reps']} interleaved reps (median, min-max)")
    table = Table(title=title)
    for col in ["build", "model", "size MiB", "tokens/s", *(["ms / 128 tok"] if decode else []),
                "peak RSS MiB", f"vs {base}"]:
        table.add_column(col, justify="left" if col in ("build", "model") else "right")
    for b in report["builds"]:
        tps = b["tokens_per_s"]
        ratio = report["ratios"].get(b["build"])
        table.add_row(
            b["build"], Path(b["model"]).name, f"{b['model_size_mib']:.1f}",
            f"{tps['median']:.2f} ({tps['min']:.2f}-{tps['max']:.2f})",
            *([f"{b['ms_per_128_tokens']:.0f}"] if decode else []),
            f"{b['peak_rss_mib']:.0f}",
            f"{ratio['median']:.3f} ({ratio['min']:.3f}-{ratio['max']:.3f})" if ratio else "1",
        )
    out = Console()
    if not out.is_terminal:
        out.width = 140  # keep the table whole when piped or captured
    out.print(table)


if __name__ == "__main__":
    main()
