"""`bench awq`: ways of making a 4-bit development model (all-Q4_0, and the formats users compare it
with), against its FP16."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import click
from click.core import ParameterSource

from ... import quality
from ...assets.dev_models import DEV_MODELS, f16_gguf, hf_folder
from ...builds import get_build
from ...modes import Precision
from ...paths import MODELS_DIR
from .. import autoround, perplexity
from ..awq import Variants, autoawq_available, make_variants, measured_rows
from ..cli_shared import BUILD, CALIB, DEV_MODEL, JSON, PERPLEXITY_TEXT, THREADS, check_machine, check_text, \
    comma_ints, finish, log
from ..models import quantized_by
from ..reports import MadeRow, TextReport, report_kinds
from ..tables import Table, optional


def _parse_seeds(_ctx, _param, value: str) -> tuple[int, ...]:
    seeds = comma_ints(value)
    if len(set(seeds)) != len(seeds):
        raise click.BadParameter(f"{value!r} repeats a seed")
    return seeds


def _parse_iters(_ctx, _param, value: str) -> tuple[int, ...]:
    iters = comma_ints(value)
    if any(i < 0 for i in iters) or len(set(iters)) != len(iters):
        raise click.BadParameter(f"{value!r}: distinct counts of 0 or more")
    return iters


def _parse_precisions(_ctx, _param, value: str) -> tuple[str, ...]:
    precisions = tuple(p.strip() for p in value.split(","))
    if any(p not in Precision.values() for p in precisions) or len(set(precisions)) != len(precisions):
        raise click.BadParameter(f"{value!r}: distinct choices of {', '.join(Precision.values())}")
    return precisions


def _check_quality_table(calib_samples: int, autoawq: bool | None, tune_steps: int, drop_list: tuple[int, ...]):
    """--quality-table makes its own awq2gguf variants: refuse the options that add others or change them."""
    if calib_samples < quality.MOST_SAMPLES:
        raise click.ClickException(f"--quality-table needs --calib-samples {quality.MOST_SAMPLES} or more: --quality "
                                   f"best reads up to {quality.MOST_SAMPLES} samples from the calibration file")
    for given, option in ((autoawq, "--autoawq"), (tune_steps, "--tune-steps"), (drop_list, "--drop-block-list")):
        if given:
            raise click.ClickException(f"{option} adds variants --quality-table does not make; leave one out")
    ctx = click.get_current_context()
    for name, option in (("seeds", "--seeds"), ("precisions", "--precisions")):
        if ctx.get_parameter_source(name) != ParameterSource.DEFAULT:
            raise click.ClickException(f"{option} changes variants --quality-table makes as a user would; leave "
                                       "one out")


@dataclass(kw_only=True)
class AwqRow(MadeRow):
    """One way of making the file: its scores, the share of plain all-Q4_0's perplexity gap to FP16
    it closes, and what making it took."""
    model: str  # the method
    gap_closed: float


@report_kinds("awq")
@dataclass(kw_only=True)
class AwqReport(TextReport):
    model: str             # the development model's title
    calib_samples: int
    calib_tokens: int
    seeds: list[int]
    fp16_ppl: float
    rows: list[AwqRow]
    dev_model: str | None = None  # reports before the second development model have none
    reference: str | None = None  # where the FP16's weights come from (reports before issue 59 have none)
    ROWS = {"rows": AwqRow}

    def table(self) -> Table:
        origin = f", {self.reference}" if self.reference else ""
        title = (f"{self.model} as each method makes it, on the {self.build} build: perplexity over {self.chunks} x "
                 f"{self.ctx} tokens (FP16{origin}: {self.fp16_ppl:.3f}), KLD vs FP16; calibration "
                 f"{self.calib_samples} x {self.calib_tokens} tokens")
        headers = ["method", "size MiB", "PPL", "KLD", "same top %", "PPL gap closed %", "make s", "peak RSS MiB"]
        rows = [[r.model, f"{r.size_mib:.1f}", f"{r.ppl:.3f}", f"{r.kld:.4f}", f"{r.same_top_p:.2f}",
                 f"{100 * r.gap_closed:.0f}", optional(r.make_s, ".0f"), optional(r.peak_rss_mib, ".0f")]
                for r in self.rows]
        return Table(title, headers, rows)


@click.command()
@BUILD
@PERPLEXITY_TEXT
@CALIB
@click.option("--seeds", default="0", show_default=True, callback=_parse_seeds,
              help="Comma-separated seeds: one self-sampled variant per seed, to show the spread.")
@click.option("--autoawq/--no-autoawq", default=None,
              help="Include the AutoAWQ engine (slow: ~20 min here). Default: when it is installed.")
@click.option("--tune-steps", type=click.IntRange(0), default=0, show_default=True,
              help="Add the calibration-file and first-seed variants tuned for this many steps (awq2gguf "
                   "--tune-steps), the whole model and block by block.")
@click.option("--drop-block-list", "drop_list", metavar="I,J,...",
              callback=lambda _ctx, _param, value: comma_ints(value, "block numbers"),
              help="Add the calibration-file variant with these blocks dropped (e.g. SLEB's choice in bench prune), "
                   "and with --tune-steps dropped and tuned: how much of the pruning's loss tuning wins back.")
@click.option("--autoround-iters", metavar="K,L,...", default="", callback=_parse_iters,
              help=f"Add Intel's AutoRound {autoround.VERSION} gguf:q4_0 with these --iters per block (0: its "
                   "optimized rounding alone; slow: ~20 min per run on SmolLM2-135M here), as written and with "
                   "the matrices it keeps in other types put in Q4_0. Needs `make autoround`.")
@click.option("--precisions", metavar="P,Q,...", default="auto", show_default=True, callback=_parse_precisions,
              help=f"awq2gguf --precision ({', '.join(Precision.values())}) of the calibration-file and self-sampled "
                   "variants, each made once per precision (e.g. fp32,bf16 to compare them); the other variants "
                   "use the first.")
@click.option("--quality-table", is_flag=True,
              help="Make awq2gguf only as the README's --quality table has it: each --quality, with the output "
                   "matrix in Q4_0 and in Q8_0, the calibration samples each quality's own (--calib-samples: the "
                   f"imatrix's and AutoRound's, at least {quality.MOST_SAMPLES}, the most "
                   "a preset reads from the file).")
@THREADS
@DEV_MODEL
@JSON
def awq(build_name, text, ctx, chunks, calib_samples, calib_tokens, seeds, autoawq, tune_steps, drop_list,
        autoround_iters, precisions, quality_table, threads, dev_model, as_json):
    """All-Q4_0 --dev-model made by each method (plain, llama.cpp imatrix, awq2gguf with a
    calibration file and with self-sampled text, AutoAWQ; stock IQ4_NL and Q4_K_M with the imatrix
    beside them: compare those on a NAME-permuted twin), with perplexity and KLD against its
    FP16, the share of plain all-Q4_0's perplexity gap each closes, and the time and peak RSS
    each took to make."""
    if quality_table:
        _check_quality_table(calib_samples, autoawq, tune_steps, drop_list)
    check_text(text)
    if autoawq and not autoawq_available():
        raise click.ClickException("AutoAWQ is not installed: run `make autoawq`, or pass --no-autoawq")
    if autoround_iters and not autoround.available():
        raise click.ClickException(f"AutoRound is not installed ({autoround.COMMAND}): run `make autoround`")
    busy = check_machine(threads)
    with tempfile.TemporaryDirectory() as tmp:
        build = get_build(build_name)
        f16 = f16_gguf(dev_model)
        plain = quantized_by(build, f16, "Q4_0", log)
        variants = Variants(calib_samples, calib_tokens, threads,
                            autoawq=autoawq_available() if autoawq is None else autoawq, seeds=seeds,
                            tune_steps=tune_steps, drop_list=drop_list, autoround_iters=autoround_iters,
                            precisions=precisions, quality_table=quality_table)
        made = make_variants(build, hf_folder(dev_model), f16, plain, text, MODELS_DIR / "awq-compare" / dev_model,
                             variants, log)
        log("computing FP16 logits, then each variant's PPL and KLD")
        base_logits = Path(tmp) / "base.kld"
        fp16_ppl = perplexity.on_text(build, f16, text, ctx, chunks, threads, save_logits=base_logits)["ppl"]
        rows = measured_rows(made, fp16_ppl, lambda m: perplexity.against_base(build, m, base_logits, threads))
    report = AwqReport(kind="awq", model=DEV_MODELS[dev_model].title, dev_model=dev_model, build=build_name,
                       text=str(text), ctx=ctx, chunks=chunks, calib_samples=calib_samples, calib_tokens=calib_tokens,
                       seeds=list(seeds), fp16_ppl=fp16_ppl, busy_warning=busy, rows=rows,
                       reference=DEV_MODELS[dev_model].reference)
    finish(report, as_json)
