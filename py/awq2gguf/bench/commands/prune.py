"""`bench prune`: blocks dropped before AWQ (SLEB vs ShortGPT), against accuracy and speed."""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

import click

from ...assets.dev_models import DEV_MODELS, f16_gguf, hf_folder
from ...builds import get_build
from ...modes import DropMethod
from ...paths import MODELS_DIR
from .. import perplexity, plots
from ..awq import CALIBRATION_FILE, calibration_file
from ..eval import evaluate_model
from ..cli_shared import BUILD, CALIB, DEV_MODEL, JSON, PERPLEXITY_TEXT, THREADS, check_machine, check_text, \
    comma_ints, finish, log, progress
from ..prune import interleaved_speed, make_pruned
from ..reports import MadeRow, TextReport, report_kinds
from .eval import EvalRow
from ..tables import Table
from ..tasks import TASKS, load_items


def _parse_counts(_ctx, _param, value: str) -> tuple[int, ...]:
    counts = comma_ints(value)
    if not any(n > 0 for n in counts) or any(n < 0 for n in counts):
        raise click.BadParameter(f"{value!r}: give block counts >= 0, at least one above 0")
    return counts


def _parse_methods(_ctx, _param, value: str) -> list[str]:
    methods = [m for m in value.split(",") if m]
    bad = [m for m in methods if m not in DropMethod.values()]
    if bad or not methods:
        raise click.BadParameter(f"unknown method {bad[0] if bad else '(none)'}: "
                                 f"choose from {', '.join(DropMethod.values())}")
    return methods


@dataclass(kw_only=True)
class PruneRow(EvalRow, MadeRow):
    """FP16, or the file made with N blocks dropped: which, its calibration perplexity after the
    drop, its scores, what making it took, and its decode and prefill tokens/s against N = 0
    (bench.prune.interleaved_speed)."""
    method: str
    n: int
    blocks: list[int]
    calib_ppl: float | None  # none for FP16
    decode: dict | None = None  # none for FP16
    prefill: dict | None = None


@report_kinds("prune")
@dataclass(kw_only=True)
class PruneReport(TextReport):
    model: str
    dev_model: str
    calib_samples: int
    calib_tokens: int
    limit: int             # items per multiple-choice task
    reps: int              # interleaved speed repetitions
    threads: int
    n_blocks: int          # of the unpruned model
    tasks: dict[str, str]  # task -> its metric
    rows: list[PruneRow]   # FP16, then per (method, N)
    ROWS = {"rows": PruneRow}

    def table(self) -> Table:
        title = (f"{self.model} all-Q4_0 (awq2gguf, calibration file) with blocks dropped, {self.build} build: "
                 f"PPL over {self.chunks} x {self.ctx} tokens, KLD vs FP16, {len(self.tasks)} MC tasks "
                 f"(first {self.limit} items), tg128/pp512 over {self.reps} interleaved reps, {self.threads} threads")
        headers = ["method", "N", "blocks dropped", "size MiB", "calib PPL", "PPL", "KLD", "MC avg",
                   *self.tasks, "decode t/s", "decode vs N=0", "L/(L-N)", "prefill vs N=0"]
        rows = []
        for r in self.rows:
            speed = r.decode
            rows.append([r.method, str(r.n), ",".join(map(str, r.blocks)) or "-",
                         f"{r.size_mib:.1f}", f"{r.calib_ppl:.2f}" if r.calib_ppl else "-",
                         f"{r.ppl:.3f}", f"{r.kld:.4f}", f"{100 * r.mc_average:.1f}",
                         *[f"{100 * r.tasks[t]['score']:.1f}" for t in self.tasks],
                         f"{speed['median']:.1f}" if speed else "-",
                         f"{speed['ratio']['median']:.3f}" if speed else "-",
                         f"{self.n_blocks / (self.n_blocks - r.n):.3f}" if speed else "-",
                         f"{r.prefill['ratio']['median']:.3f}" if speed else "-"])
        return Table(title, headers, rows)


@click.command()
@BUILD
@PERPLEXITY_TEXT
@click.option("--counts", default="0,2,4,6,8", show_default=True, callback=_parse_counts,
              help="Numbers of blocks to drop (the unpruned file is always made: the speeds are against it).")
@click.option("--methods", default=",".join(DropMethod.values()), show_default=True,
              callback=_parse_methods,
              help=f"Comma-separated: {', '.join(DropMethod.values())}.")
@CALIB
@click.option("--limit", type=click.IntRange(min=1), default=250, show_default=True,
              help="First N validation items per multiple-choice task.")
@click.option("--reps", type=click.IntRange(min=1), default=3, show_default=True,
              help="Interleaved speed repetitions per file.")
@THREADS
@DEV_MODEL
@JSON
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path),
              help="Also draw perplexity and MC accuracy against decode speed (PNG).")
def prune(build_name, text, ctx, chunks, counts, methods, calib_samples, calib_tokens, limit, reps, threads, dev_model,
          as_json, plot):
    """All-Q4_0 --dev-model made by awq2gguf with 0, 2, 4, ... blocks dropped by SLEB and by
    ShortGPT (calibration from the second half of --text, as in `bench awq`): which blocks, size,
    perplexity and KLD against its FP16, the multiple-choice tasks, and decode/prefill speed of
    each file against the unpruned one."""
    check_text(text)
    busy = check_machine(threads)
    with tempfile.TemporaryDirectory() as tmp:
        build, model_dir, f16 = get_build(build_name), hf_folder(dev_model), f16_gguf(dev_model)
        out_dir = MODELS_DIR / "prune" / dev_model
        out_dir.mkdir(parents=True, exist_ok=True)
        calib = calibration_file(model_dir, text, calib_samples, calib_tokens, out_dir / CALIBRATION_FILE)
        args = ["--calib", str(calib), "--calib-samples", str(calib_samples), "--calib-tokens",
                str(calib_tokens), "--threads", str(threads)]
        made = make_pruned(build, model_dir, out_dir, args, counts, methods, log)
        items = {name: load_items(TASKS[name], limit) for name in TASKS}
        log("FP16 logits, then each file's perplexity, KLD and tasks")
        base_logits = Path(tmp) / "base.kld"
        perplexity.on_text(build, f16, text, ctx, chunks, threads, save_logits=base_logits)
        metrics = lambda m: perplexity.against_base(build, m, base_logits, threads)  # noqa: E731
        files = [f16] + [p.made.path for p in made]
        with progress("evaluating", len(files) * sum(map(len, items.values()))) as advance:
            evaluated = [evaluate_model(build, f, metrics, items, threads, advance) for f in files]
        with progress("decode and prefill runs", 2 * reps * len(made)) as advance:
            decode = interleaved_speed(build, [p.made.path for p in made], threads, 0, 128, reps, advance)
            prefill = interleaved_speed(build, [p.made.path for p in made], threads, 512, 0, reps, advance)
    rows = [dict(evaluated[0], method="FP16", n=0, blocks=[], calib_ppl=None)]
    for p, e, d, pf in zip(made, evaluated[1:], decode, prefill):
        rows.append(dict(e, method=p.method, n=p.n, blocks=p.blocks, calib_ppl=p.calib_ppl, make_s=p.made.seconds,
                         peak_rss_mib=p.made.peak_rss / 2**20, decode=d, prefill=pf))
    n_blocks = json.loads((model_dir / "config.json").read_text())["num_hidden_layers"]
    report = PruneReport(kind="prune", model=DEV_MODELS[dev_model].title, dev_model=dev_model, build=build_name,
                         text=str(text), ctx=ctx, chunks=chunks, calib_samples=calib_samples,
                         calib_tokens=calib_tokens, limit=limit, reps=reps, threads=threads, n_blocks=n_blocks,
                         tasks={name: TASKS[name].metric for name in TASKS}, busy_warning=busy, rows=rows)
    finish(report, as_json)
    if plot:
        plots.accuracy_vs_speed(report, plot)
        log(f"plot written to {plot}")
