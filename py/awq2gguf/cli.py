"""`awq2gguf MODEL_DIR OUT.gguf`: the toolkit's main job, with progress per stage and per block."""

from __future__ import annotations

import time
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from . import quality, tune, tune_blocks
from .awq.layout import SUPPORTED_ARCHITECTURES
from .cli_base import Command
from .cli_options import THREADS, build_option, comma_ints, field_option, options
from .metadata import Key
from .modes import DropMethod, Engine, OutputType, Precision, QType, Quality, TuneInput, TuneLoss, TuneMode, TuneParams
from .options import Options, OptionsError, default
from .pipeline import Summary, run
from .progress import RichProgress

err = Console(stderr=True)


def _grid(_ctx, _param, steps: int) -> tuple[float, ...]:
    if steps < 0:
        raise click.BadParameter("needs 0 steps (no scales) or more")
    return tuple(i / steps for i in range(steps + 1)) if steps else (0.0,)


HELP = f"""Quantize the Hugging Face model in MODEL_DIR to OUT.gguf with AWQ scales, clipping and
compensated rounding.

Calibrates on text (optionally merging a LoRA adapter first and dropping whole decoder blocks
after), searches per-channel AWQ scales against ggml's exact quantizer of the type each matrix gets
in OUT (--qtype: llama.cpp's per-tensor mixture), and on Q4_0 per-block clipping and column-by-column
GPTQ-style error compensation, and folds the result into weights whose plain rounding is exactly
what was searched (a standard model: stock llama.cpp loads the result too); optionally trains it further through the same quantizer
against the FP model's next-token distributions (--tune-steps). Each choice is kept only where it beats plain rounding,
and the finished model is checked against plain rounding on held-out calibration text. The model is held
one decoder block at a time; the vendored convert_hf_to_gguf.py writes OUT (other --qtype values and
--build stock go through an F32 GGUF and llama-quantize). OUT appears only when complete.

Supported architectures: {", ".join(SUPPORTED_ARCHITECTURES)}.
"""


# awq2gguf's options, in --help's order: the Options field each sets, its flags, type and help
# (the defaults and least values come from Options).
OPTIONS = options(
    field_option("qtype", "--qtype", type=click.Choice(QType.values(), case_sensitive=False),
                 help="Type of OUT, as llama-quantize names it. Q4_0 puts every weight, output and embeddings "
                      "included, in Q4_0 (the patched llama-quantize), the fastest file; the K-quant and IQ4 types "
                      "are llama.cpp's mixtures (each matrix's type as llama-quantize chooses it, falling back where "
                      "a row length does not take a type's blocks, said in the log), with the scales searched on "
                      "each matrix's own grid and an imatrix of the calibration, and the tuning (--quality best, "
                      "--tune-steps) through each matrix's exact grid; clipping and compensated rounding act on Q4_0 "
                      "matrices only."),
    field_option("calib", "--calib", type=click.Path(dir_okay=False, path_type=Path),
                 help="Calibration text: plain text, or .jsonl with a \"text\" field per line. Default: the model "
                      "samples its own text with llama.cpp from an all-Q4_0 GGUF."),
    field_option("lora", "--lora", type=click.Path(path_type=Path),
                 help="A PEFT LoRA adapter folder (adapter_config.json + adapter_model.safetensors) for MODEL_DIR, "
                      "merged into its weights with peft before calibration and AWQ; OUT's metadata records its name, "
                      "rank and sha256."),
    field_option("drop_blocks", "--drop-blocks",
                 help="Drop this many decoder blocks before AWQ, chosen on the calibration tokens by "
                      "--drop-blocks-method; OUT has fewer blocks (stock llama.cpp loads it) and its metadata records "
                      "which. Costs one pass over the blocks per block dropped (SLEB)."),
    field_option("drop_method", "--drop-blocks-method", type=click.Choice(DropMethod.values()),
                 help="sleb: remove, one at a time, the block whose absence costs the least calibration perplexity; "
                      "shortgpt: the blocks that change their input least (1 - cosine), at once."),
    field_option("drop_list", "--drop-block-list", metavar="I,J,...", default=None,
                 callback=lambda _ctx, _param, value: comma_ints(value, "block numbers, e.g. 14,17"),
                 help="Drop exactly these blocks (0-based, in this order), e.g. as another OUT's "
                      f"{Key.DROP_BLOCKS_BLOCKS.gguf} records them; instead of --drop-blocks."),
    field_option("tune_steps", "--tune-steps",
                 help=f"After AWQ, train the model through each matrix's exact quantizer for this many steps of "
                      f"{tune.SEQUENCES_PER_STEP} calibration sequences: the whole model distilling the FP model's "
                      f"next-token distributions (its top {tune.TOP_K}; with --drop-blocks, the unpruned model's), or "
                      "each decoder block in turn, this many steps each, matching the FP model's hidden states after "
                      "it (see --tune-mode). Wants more text than the search (16 sequences overfit; e.g. "
                      "--calib-samples 128). Kept only if it beats the untuned model on the held-out calibration "
                      "samples (block-wise: each block, then the whole model)."),
    field_option("tune_mode", "--tune-mode", type=click.Choice(TuneMode.values()),
                 help=f"model: the whole model at once (about {tune.WHOLE_MODEL_BYTES_PER_WEIGHT} bytes of memory per "
                      "weight); blocks: one decoder block at a time (the memory of one block); auto: the whole model "
                      f"where that fits in {tune.MEMORY_SHARE:.0%} of the free memory, else blocks."),
    field_option("tune_input", "--tune-input", type=click.Choice(TuneInput.values()),
                 help="Block-wise tuning: each block's input is the tuned model's own (it corrects what the blocks "
                      "before it left) or the FP model's."),
    field_option("tune_lr", "--tune-lr", type=float,
                 show_default=f"{tune.LR:g} whole-model, {tune_blocks.LR:g} block-wise",
                 help="Peak learning rate of the tuning, in steps of the Q4_0 grid (the median over the block "
                      "matrices, or over the block's; so a model with smaller weights moves them as far): AdamW, "
                      "warm-up over a tenth of the steps, then a cosine to 0."),
    field_option("tune_params", "--tune-params", type=click.Choice(TuneParams.values()),
                 help="all: every block matrix and a tied output matrix (through the quantizer), norm and bias; "
                      "norms: the norms and biases only (cheaper, and they stay F32 in the GGUF)."),
    field_option("tune_loss", "--tune-loss", type=click.Choice(TuneLoss.values()),
                 help="kl: the KL divergence per token, averaged; tsld: weighted by the softmax of the teacher's own "
                      "cross-entropy on each next token (TSLD, Kim et al. 2023)."),
    field_option("tune_scales", "--tune-scales/--no-tune-scales",
                 help="The tuning learns each Q4_0 block's scale too, as a factor of ggml's in [0.5, 1] (a grid "
                      "that clips the block; LSQ's gradient), beside the weights; the GGUF holds the learned grid. "
                      "--qtype Q4_0 only."),
    field_option("tune_norms_steps", "--tune-norms-steps",
                 help="After block-wise tuning, train the whole model's norms and biases end to end for this many "
                      "steps, distilling the FP model's next-token distributions (as --tune-params norms); kept only "
                      "if it beats the block-wise model on the held-out samples. Holds the whole model in memory "
                      "(about 6 bytes per weight)."),
    field_option("tune_norms_output", "--tune-norms-output/--no-tune-norms-output",
                 help="--tune-norms-steps trains a tied output matrix too (the embedding table: one tensor), through "
                      "Q4_0 (not when --output-type q8_0 keeps it in Q8_0). About 24 more bytes of memory per weight "
                      "of it."),
    field_option("calib_samples", "--calib-samples", show_default="16; --quality best: by the model's size",
                 help="Number of calibration sequences."),
    field_option("search_samples", "--search-samples", show_default="all",
                 help="The AWQ search reads only N of the calibration sequences, spread evenly over them "
                      "(tuning reads them all): its cost grows with the tokens it reads."),
    field_option("calib_tokens", "--calib-tokens", help="Tokens per calibration sequence."),
    field_option("calib_held_out", "--calib-held-out",
                 help="More calibration sequences, never searched on: the finished model's KL divergence to FP on "
                      "them is checked against plain rounding's, and plain rounding is written if AWQ lost (both are printed "
                      "and recorded in OUT's metadata). 0: no check."),
    field_option("prompts", "--prompts/--no-prompts",
                 help="Self-sampled calibration: start the sequences in turn from the opening of a passage (history, "
                      "science, news, fiction, dialogue, code, maths), continued as plain text, and from a short "
                      "request through the chat template; --no-prompts: from BOS alone, where a code model samples "
                      "only code."),
    field_option("clip", "--clip/--no-clip",
                 help="Search a clipping range for each Q4_0 block of the output matrix, and of the decoder blocks "
                      "(not q/k) that are not compensated."),
    field_option("compensate", "--compensate/--no-compensate",
                 help="Last, round each linear's weights column by column, pushing each column's error onto the "
                      "columns not yet rounded (GPTQ on the exact Q4_0 grid; llama-quantize reproduces it)."),
    field_option("imatrix", "--imatrix/--no-imatrix",
                 help="The K-quant and IQ4 --qtype: quantize with an importance matrix of the calibration inputs "
                      "(what llama-imatrix collects, of the inputs the scaled matrices see), the same one the search "
                      "weighed its errors by; --no-imatrix: plain llama-quantize."),
    field_option("untie_output", "--untie-output", is_flag=True,
                 help="Give tied models a separate output matrix so AWQ can scale it (costs one more vocab x hidden "
                      "Q4_0 tensor)."),
    field_option("output_type", "--output-type", type=click.Choice(OutputType.values()),
                 help="The output matrix's type in the all-Q4_0 OUT (a tied model's embedding table with it): q8_0 "
                      "costs vocabulary x hidden / 2 more bytes for a lower error (AutoRound's gguf:q4_0 makes the "
                      "same trade); recorded in the metadata."),
    field_option("quality", "--quality", type=click.Choice(Quality.values()),
                 help="fast: AWQ with compensated rounding on --calib-samples (minutes). best: also block-wise "
                      f"tuning, {quality.described()} (tens of minutes to hours on 2 cores; it prints what it chose "
                      "and the time it should take). A --calib-samples other than the default is kept."),
    field_option("grid", "--alpha-steps", type=int, default=len(default("grid")) - 1, callback=_grid,
                 help="Scale exponent grid: alpha = 0, 1/N, ..., 1; 0: no scales (plain rounding, clipped and "
                      "compensated if those are on)."),
    field_option("engine", "--engine", type=click.Choice(Engine.values()),
                 help="autoawq: AutoAWQ 0.2.9's search instead of ours, same calibration and export (install it with "
                      "`make autoawq`)."),
    build_option("Whose llama.cpp samples calibration text, and whose llama-quantize makes OUT (stock: its own Q4_0 "
                 "mixture; patched Q4_0 is written by the converter, as the patched llama-quantize would).",
                 dest="build"),
    THREADS,
    field_option("precision", "--precision", type=click.Choice(Precision.values()),
                 help="The big matrix products' arithmetic (AWQ's search, compensated rounding and block checks; "
                      "block-wise tuning's training steps): bf16 (about twice as fast on CPUs with bf16 matrix "
                      "instructions: AVX-512 BF16, AMX, Arm BF16) or FP32; auto: bf16 where the CPU has them. The "
                      "Q4_0 grid, the factorisations, the optimizer, the held-out checks and whole-model tuning stay "
                      "FP32."),
    field_option("seed", "--seed", type=int, help="Seed for sampled calibration text."),
)


@click.command(cls=Command, help=HELP, context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("model_dir", type=click.Path(path_type=Path))
@click.argument("out", type=click.Path(dir_okay=False, path_type=Path))
@OPTIONS
def main(model_dir: Path, out: Path, **given):
    import torch
    from transformers.utils import logging as hf_logging

    torch.set_num_threads(given["threads"])
    hf_logging.disable_progress_bar()  # our own bars cover loading and saving
    try:
        opts = Options(**given)
    except OptionsError as e:
        raise click.UsageError(str(e)) from None
    started = time.perf_counter()
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TimeRemainingColumn(), console=err, transient=True) as progress:
        summary = run(model_dir, out, opts, RichProgress(progress))
    _print_search(summary)
    _print_tuning(summary)
    _print_checks(summary)
    size = out.stat().st_size / 2**20
    types = ", ".join(f"{n} {t}" for t, n in sorted(summary.types.items(), key=lambda item: -item[1]))
    kind = f"{opts.qtype}: {types}" if len(summary.types) > 1 else str(opts.qtype)
    if summary.output_q8_0_bytes is not None:
        kind += f"; output matrix in Q8_0: {summary.output_q8_0_bytes / 2**20:.1f} MiB of it"
    err.print(f"[bold]wrote {out}[/] ({size:.1f} MiB, {kind}) in {time.perf_counter() - started:.0f} s")


def _print_search(summary: Summary) -> None:
    """The calibration, the blocks dropped and what the AWQ search kept."""
    err.print(f"calibration: {summary.calibration}")
    if (d := summary.dropped) is not None:
        steps = " -> ".join(f"{p:.2f} (-{b})" for b, p in zip(d.blocks, d.ppl))
        err.print(f"dropped blocks {', '.join(map(str, d.blocks))} ({d.method}): calibration perplexity "
                  f"{d.ppl_before:.2f} -> {steps}")
    if summary.groups_kept is not None:
        err.print(f"AWQ: kept {summary.groups_kept[0]}/{summary.groups_kept[1]} scaling groups (mean alpha "
                  f"{summary.mean_alpha:.2f}), clipping in {summary.clipped[0]}/{summary.clipped[1]} and "
                  f"compensated rounding in {summary.compensated[0]}/{summary.compensated[1]} blocks; "
                  f"block output error {summary.block_error_ratio:.3f}x plain")


def _print_tuning(summary: Summary) -> None:
    """Each tuning's losses, and what the block-wise and the norms' tuning kept."""
    if summary.tune_losses:
        err.print(f"tuning (peak lr {summary.tune_lr:.3g}): distillation loss {summary.tune_losses[0]:.4f} "
                  f"(first step) -> {summary.tune_losses[-1]:.4f} (last of {len(summary.tune_losses)})")
    if summary.tuned_blocks:
        kept = [b for b in summary.tuned_blocks if b.kept]
        err.print(f"block-wise tuning: kept {len(kept)}/{len(summary.tuned_blocks)} tuned blocks" + (
            "; held-out output error of the kept ones " +
            f"{sum(b.held_out_tuned for b in kept) / sum(b.held_out_untuned for b in kept):.3f}x untuned"
            if kept and kept[0].held_out_tuned is not None else ""))
    if summary.norms_losses:
        verdict = "kept" if summary.norms_kept else "[red]lost: kept the block-wise model[/]"
        check = ("" if summary.check_norms_kld is None else f"; held-out KLD to FP {summary.check_norms_kld:.4f} vs "
                 f"block-wise {summary.check_blocks_kld:.4f}: {verdict}")
        trained = "norms and the tied output matrix" if summary.norms_output else "norms"
        err.print(f"{trained} end to end (peak lr {summary.norms_lr:.3g}): distillation loss "
                  f"{summary.norms_losses[0]:.4f} -> {summary.norms_losses[-1]:.4f}{check}")


def _print_checks(summary: Summary) -> None:
    """The held-out checks: of tuning against the untuned model, and of OUT against plain rounding."""
    if summary.check_untuned_kld is not None:
        verdict = "kept" if summary.tune_kept else "[red]lost: kept the untuned model[/]"
        err.print(f"check of tuning on held-out calibration: KLD to FP {summary.check_tuned_kld:.4f} vs untuned "
                  f"{summary.check_untuned_kld:.4f}: {verdict}")
    if summary.check_kld is not None:
        verdict = "[red]lost: wrote plain rounding[/]" if summary.fell_back else "kept"
        err.print(f"check on held-out calibration: KLD to FP {summary.check_kld:.4f} vs plain rounding "
                  f"{summary.check_plain_kld:.4f}: {verdict}")
