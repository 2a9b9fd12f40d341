"""`bench eval`: perplexity, KL divergence to a base and multiple-choice tasks, one row per model."""

from __future__ import annotations

import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import click

from ...builds import get_build
from ...errors import Awq2ggufError
from .. import perplexity, plots, results
from ..eval import evaluate_model
from ..cli_shared import (DEV_MODEL, RUN_BUILD, JSON, PERPLEXITY_TEXT, THREADS, check_machine, check_text, err, finish,
                          log, progress)
from ..models import dev_model_suite
from ..reports import QualityRow, TextReport, report_kinds
from ..tables import Table, optional
from ..tasks import TASKS, load_items


def _parse_tasks(_ctx, _param, value: str) -> list[str]:
    names = [n.strip() for n in value.split(",") if n.strip() and n.strip() != "none"]
    unknown = [n for n in names if n not in TASKS]
    if unknown:
        raise click.BadParameter(f"unknown task(s) {', '.join(unknown)}; choose from {', '.join(TASKS)} or none")
    return names


@dataclass(kw_only=True)
class EvalRow(QualityRow):
    """One model file: its scores, each multiple-choice task's (bench.eval.mc_accuracy) and their
    average, and the time it all took."""
    model: str  # the file
    tasks: dict[str, dict]
    wall_s: float
    mc_average: float | None = None  # none without tasks


@report_kinds("eval")
@dataclass(kw_only=True)
class EvalReport(TextReport):
    base: str | None       # the reference model for KLD, if any
    limit: int
    tasks: dict[str, str]  # task -> its metric (acc or acc_norm)
    rows: list[EvalRow]
    interrupted: bool = False
    dev_model: str | None = None
    error: str | None = None  # set when a later model failed: the rows before it are kept
    ROWS = {"rows": EvalRow}

    def table(self) -> Table:
        task_names = list(self.tasks)
        has_kld = self.base is not None
        title = (f"accuracy on the {self.build} build: perplexity over {self.chunks} x {self.ctx} tokens"
                 + (f", KLD vs {Path(self.base).name}" if has_kld else "")
                 + (f", first {self.limit} items per task" if self.limit else ""))
        headers = ["model", "size MiB", "PPL", *(["KLD", "same top %"] if has_kld else []),
                   *[f"{t} ({self.tasks[t]})" for t in task_names], "MC avg", "wall s"]
        rows = []
        for r in self.rows:
            rows.append([
                Path(r.model).name, f"{r.size_mib:.1f}", f"{r.ppl:.3f}",
                *([f"{r.kld:.4f}", f"{r.same_top_p:.2f}"] if has_kld else []),
                *[f"{100 * r.tasks[t]['score']:.1f}" if t in r.tasks else "-" for t in task_names],
                optional(None if r.mc_average is None else 100 * r.mc_average, ".1f"),
                f"{r.wall_s:.0f}",
            ])
        return Table(title, headers, rows)


@click.command(name="eval")
@click.option("--model", "-m", "model_paths", multiple=True, type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="GGUF to evaluate; repeat for several rows. Default: the FP16, stock Q4_0 and patched all-Q4_0 "
                   "of --dev-model.")
@DEV_MODEL
@click.option("--base", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Reference model for KL-divergence and top-token agreement (default with the --dev-model suite: its FP16).")
@RUN_BUILD
@PERPLEXITY_TEXT
@click.option("--tasks", "task_names", default=",".join(TASKS), show_default=True, callback=_parse_tasks,
              help="Multiple-choice tasks, comma-separated, or none.")
@click.option("--limit", type=click.IntRange(min=1), default=250, show_default=True,
              help="First N validation items per task.")
@THREADS
@JSON
@click.option("--plot", type=click.Path(dir_okay=False, path_type=Path), help="Also draw accuracy vs size (PNG).")
def eval_(model_paths, dev_model, base, build_name, text, ctx, chunks, task_names, limit, threads, as_json, plot):
    """Accuracy: perplexity, KL-divergence to a base, multiple-choice tasks (one row per model)."""
    check_text(text)
    busy = check_machine(threads)
    suite_model = None
    build = get_build(build_name)
    if not model_paths:
        suite_model = dev_model
        model_paths = dev_model_suite(dev_model, log)
        base = base or model_paths[0]
    items = {name: load_items(TASKS[name], limit) for name in task_names}

    report = EvalReport(kind="eval", dev_model=suite_model, build=build_name, text=str(text), ctx=ctx, chunks=chunks,
                        base=str(base) if base else None, limit=limit, busy_warning=busy,
                        tasks={name: TASKS[name].metric for name in task_names}, rows=[])
    with tempfile.TemporaryDirectory() as tmp:
        try:
            if base:
                log(f"computing base logits of {base.name}")
                base_logits = Path(tmp) / "base.kld"
                perplexity.on_text(build, base, text, ctx, chunks, threads, save_logits=base_logits)
                text_metrics = lambda m: perplexity.against_base(build, m, base_logits, threads)
            else:
                text_metrics = lambda m: perplexity.on_text(build, m, text, ctx, chunks, threads)
            total = len(model_paths) * sum(len(v) for v in items.values())
            with progress("evaluating", total) as advance:
                for m in model_paths:
                    report.rows.append(EvalRow(**evaluate_model(build, m, text_metrics, items, threads, advance)))
        except Awq2ggufError as e:
            if report.rows:
                report.error = str(e)
                log(f"saved the finished rows to {results.save(report)}")
            raise
        except KeyboardInterrupt:
            report.interrupted = True
    if not report.rows:
        err.print("interrupted before any model finished: nothing to report")
        sys.exit(130)
    finish(report, as_json)
    if plot:
        plots.accuracy_vs_size(report, plot)
        log(f"plot written to {plot}")
