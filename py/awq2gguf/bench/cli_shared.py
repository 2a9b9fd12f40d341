"""What the bench commands share: option groups declared once, their parsers, the progress bar,
the busy-machine check, the default models, and how a finished report is saved and printed."""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from ..assets.dev_models import DEV_MODEL_NAMES, DEV_MODELS
from ..assets.synthetic import DEFAULT_SHAPE, SHAPES
from ..builds import BENCH_BUILD_NAMES, BUILD_NAMES, get_build
from .. import cli_options
from ..host import cpu_info
from ..paths import DEFAULT_EVAL_TEXT
from ..progress import RichProgress, ticks
from ..quality import FAST_CALIB_SAMPLES
from . import results, tables
from .machine import busy_warning, threads_warning
from .models import quantized_by, synthetic_f16
from .reports import Report

err = Console(stderr=True)


def log(msg: str) -> None:
    err.print(f"[dim]{msg}[/]")


def parse_builds(choices):
    """A --builds callback that accepts these names."""
    def parse(_ctx, _param, value: str) -> list[str]:
        names = [n.strip() for n in value.split(",") if n.strip()]
        unknown = [n for n in names if n not in choices]
        if unknown or not names:
            raise click.BadParameter(f"unknown build(s) {', '.join(unknown) or '(none)'}; "
                                     f"choose from {', '.join(choices)}")
        return names
    return parse


THREADS, comma_ints, options = cli_options.THREADS, cli_options.comma_ints, cli_options.options
# bench makes its own calibration files: the fast job's count unless given
CALIB = options(cli_options.field_option("calib_samples", "--calib-samples", default=FAST_CALIB_SAMPLES),
                cli_options.field_option("calib_tokens", "--calib-tokens"))
JSON = click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout.")
DEV_MODEL = click.option("--dev-model", type=click.Choice(DEV_MODEL_NAMES), default=DEV_MODEL_NAMES[0],
                         show_default=True, help="Development model (rebuilt from PyPI wheels): " + ", ".join(
                             f"{name} is {m.title}" for name, m in DEV_MODELS.items()) + ".")
BUILD = cli_options.build_option("Build that makes and runs every model.")
BUILDS = click.option("--builds", "build_names", default="stock,patched", show_default=True,
                      callback=parse_builds(BUILD_NAMES),
                      help="Comma-separated builds to compare; ratios are against the first.")
PEER_HELP = ("ik and ik-rtr are the peer ik_llama.cpp (`make ik-build IK_SRC=DIR`) as it is and with its run-time "
             "repack (-rtr); it runs the file the patched build makes.")
# decode, prefill, batched and roofline (BUILDS_WITH_PEER) and eval (RUN_BUILD) also run the peer.
RUN_BUILD = cli_options.build_option("Build that runs every model. " + PEER_HELP, choices=BENCH_BUILD_NAMES)
BUILDS_WITH_PEER = click.option("--builds", "build_names", default="stock,patched", show_default=True,
                                callback=parse_builds(BENCH_BUILD_NAMES),
                                help="Comma-separated builds to compare; ratios are against the first. " + PEER_HELP)
SHAPE = click.option("--shape", type=click.Choice(sorted(SHAPES)), default=DEFAULT_SHAPE, show_default=True,
                     help="Synthetic model shape used when --model is not given.")
QTYPE = click.option("--qtype", default="Q4_0", show_default=True, help="Quantization of the synthetic model.")
MODEL_OPTIONS = options(
    click.option("--model", "-m", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                 help="GGUF to run on every build. Default: the synthetic --shape model, quantized to --qtype "
                      "by each build's own llama-quantize (so each build runs the file it makes)."),
    SHAPE, QTYPE, BUILDS_WITH_PEER)
# The perplexity text and windows of `bench eval` and `bench awq`.
PERPLEXITY_TEXT = options(
    click.option("--text", type=click.Path(dir_okay=False, path_type=Path), default=DEFAULT_EVAL_TEXT,
                 show_default="$AWQ2GGUF_EVAL_TEXT or ../shared/data/wikitext-2-raw-test.txt",
                 help="WikiText-2 raw test text: perplexity on its start (bench awq: calibration from its second "
                      "half)."),
    click.option("--ctx", type=click.IntRange(min=16), default=512, show_default=True, help="Perplexity context."),
    click.option("--chunks", type=click.IntRange(min=1), default=20, show_default=True, help="Perplexity windows."))


def check_text(text: Path) -> None:
    if not text.is_file():
        raise click.BadParameter(
            f"{text} not found. Pass --text FILE or set AWQ2GGUF_EVAL_TEXT to the WikiText-2 raw test text "
            "(the test split joined with blank lines).", param_hint="--text")


@contextmanager
def progress(label: str, total: int):
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  console=err, transient=True) as bar, RichProgress(bar, say_done=False).stage(label, total) as stage:
        yield ticks(stage)


def check_machine(threads: int) -> str | None:
    """Warn about too many threads or a busy machine; the busy warning goes into the report."""
    warning = busy_warning(threads)
    for w in (threads_warning(threads), warning):
        if w:
            err.print(f"[bold yellow]warning:[/] {w}")
    return warning


def models_for(builds, model, shape, qtype) -> dict[str, Path]:
    """The given GGUF for every build, or the synthetic shape quantized by each build itself (the peer,
    which has no quantizer of ours, by the patched build: the same file)."""
    if model:
        return {b.name: model for b in builds}
    src = synthetic_f16(shape, log)
    return {b.name: quantized_by(get_build("patched") if b.is_peer else b, src, qtype, log) for b in builds}


def finish(report: Report, as_json: bool) -> None:
    """Record the host, save the report, then print it as a table (or JSON)."""
    report.host = cpu_info().describe()
    path = results.save(report)
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2))
    else:
        tables.print_rich(report.titled_table())
    if report.busy_warning:
        err.print(f"[bold yellow]measured on a busy machine:[/] {report.busy_warning}")
    if getattr(report, "interrupted", False):
        err.print("[bold yellow]interrupted:[/] the report holds only what finished")
    log(f"saved {path}")
