"""`awq2gguf MODEL_DIR OUT.gguf`: the toolkit's main job, with progress per stage and per block."""

from __future__ import annotations

import time
from contextlib import contextmanager
from pathlib import Path

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from . import prune, tune, tune_blocks
from .awq.layout import SUPPORTED_ARCHITECTURES
from .awq.search import DEFAULT_GRID
from .cli_options import THREADS, comma_ints
from .builds import BUILD_NAMES
from .host import PRECISIONS
from .pipeline import ENGINES, QTYPES, Options, run
from .proc_io import Command

err = Console(stderr=True)


class RichProgress:
    """One line per finished stage with its time; a live bar for stages that count steps."""

    def __init__(self, progress: Progress):
        self.progress = progress

    @contextmanager
    def stage(self, description, total=None):
        task = self.progress.add_task(description, total=total)
        started = time.perf_counter()
        def update(done, note=None):
            self.progress.update(task, completed=done, **({"description": f"{description}: {note}"} if note else {}))

        yield update
        self.progress.remove_task(task)
        err.print(f"[green]done[/] {description} [dim]({time.perf_counter() - started:.1f} s)[/]")

    def note(self, text):
        err.print(text)


def _grid(_ctx, _param, steps: int) -> tuple[float, ...]:
    if steps < 0:
        raise click.BadParameter("needs 0 steps (no scales) or more")
    return tuple(i / steps for i in range(steps + 1)) if steps else (0.0,)


HELP = f"""Quantize the Hugging Face model in MODEL_DIR to OUT.gguf with AWQ scales, clipping and
compensated rounding.

Calibrates on text (optionally merging a LoRA adapter first and dropping whole decoder blocks
after), searches per-channel AWQ scales and per-block clipping against llama.cpp's
exact Q4_0 quantizer, rounds column by column with GPTQ-style error compensation on the same grid,
and folds the result into weights whose plain Q4_0 rounding is exactly what was searched (a standard
model: stock llama.cpp loads the result too); optionally trains it further through the same quantizer
against the FP model's next-token distributions (--tune-steps). Each choice is kept only where it beats plain rounding,
and the finished model is checked against plain Q4_0 on held-out calibration text. The model is held
one decoder block at a time; the vendored convert_hf_to_gguf.py writes OUT (other --qtype values and
--build stock go through an F32 GGUF and llama-quantize). OUT appears only when complete.

Supported architectures: {", ".join(SUPPORTED_ARCHITECTURES)}.
"""


@click.command(cls=Command, help=HELP, context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("model_dir", type=click.Path(path_type=Path))
@click.argument("out", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--qtype", type=click.Choice(list(QTYPES), case_sensitive=False), default="Q4_0", show_default=True,
              help="Type of OUT. The scales are searched for Q4_0; Q4_0 puts every weight, output and "
                   "embeddings included, in Q4_0 (the patched llama-quantize).")
@click.option("--calib", type=click.Path(dir_okay=False, path_type=Path),
              help="Calibration text: plain text, or .jsonl with a \"text\" field per line. "
                   "Default: the model samples its own text with llama.cpp from an all-Q4_0 GGUF.")
@click.option("--lora", type=click.Path(path_type=Path),
              help="A PEFT LoRA adapter folder (adapter_config.json + adapter_model.safetensors) for MODEL_DIR, "
                   "merged into its weights with peft before calibration and AWQ; OUT's metadata records its "
                   "name, rank and sha256.")
@click.option("--drop-blocks", type=click.IntRange(0), default=0, show_default=True,
              help="Drop this many decoder blocks before AWQ, chosen on the calibration tokens by "
                   "--drop-blocks-method; OUT has fewer blocks (stock llama.cpp loads it) and its metadata "
                   "records which. Costs one pass over the blocks per block dropped (SLEB).")
@click.option("--drop-blocks-method", type=click.Choice(prune.METHODS), default="sleb", show_default=True,
              help="sleb: remove, one at a time, the block whose absence costs the least calibration "
                   "perplexity; shortgpt: the blocks that change their input least (1 - cosine), at once.")
@click.option("--drop-block-list", "drop_list", metavar="I,J,...",
              callback=lambda _ctx, _param, value: comma_ints(value, "block numbers, e.g. 14,17"),
              help="Drop exactly these blocks (0-based, in this order), e.g. as another OUT's "
                   "awq2gguf.drop_blocks.blocks records them; instead of --drop-blocks.")
@click.option("--tune-steps", type=click.IntRange(0), default=0, show_default=True,
              help=f"After AWQ, train the model through the exact Q4_0 quantizer for this many steps of "
                   f"{tune.SEQUENCES_PER_STEP} calibration sequences: the whole model distilling the FP model's "
                   f"next-token distributions (its top {tune.TOP_K}; with --drop-blocks, the unpruned model's), or "
                   "each decoder block in turn, this many steps each, matching the FP model's hidden states after "
                   "it (see --tune-mode). Wants more text than the search (16 sequences overfit; e.g. "
                   "--calib-samples 128). Kept only if it beats the untuned model on the held-out calibration "
                   "samples (block-wise: each block, then the whole model).")
@click.option("--tune-mode", type=click.Choice(tune.MODES), default="auto", show_default=True,
              help=f"model: the whole model at once (about {tune.WHOLE_MODEL_BYTES_PER_WEIGHT} bytes of memory per "
                   "weight); blocks: one decoder block at a time (the memory of one block); auto: the whole model "
                   f"where that fits in {tune.MEMORY_SHARE:.0%} of the free memory, else blocks.")
@click.option("--tune-input", type=click.Choice(tune_blocks.INPUTS), default="quantized", show_default=True,
              help="Block-wise tuning: each block's input is the tuned model's own (it corrects what the blocks "
                   "before it left) or the FP model's.")
@click.option("--tune-lr", type=click.FloatRange(min=0, min_open=True),
              show_default=f"{tune.LR:g} whole-model, {tune_blocks.LR:g} block-wise",
              help="Peak learning rate of the tuning, in steps of the Q4_0 grid (the median over the block "
                   "matrices, or over the block's; so a model with smaller weights moves them as far): AdamW, "
                   "warm-up over a tenth of the steps, then a cosine to 0.")
@click.option("--tune-params", type=click.Choice(tune.PARAMS), default="all", show_default=True,
              help="all: every block matrix and a tied output matrix (through the quantizer), norm and "
                   "bias; norms: the norms and biases only (cheaper, and they stay F32 in the GGUF).")
@click.option("--tune-loss", type=click.Choice(tune.LOSSES), default="kl", show_default=True,
              help="kl: the KL divergence per token, averaged; tsld: weighted by the softmax of the teacher's "
                   "own cross-entropy on each next token (TSLD, Kim et al. 2023).")
@click.option("--tune-norms-steps", type=click.IntRange(0), default=0, show_default=True,
              help="After block-wise tuning, train the whole model's norms and biases end to end for this many "
                   "steps, distilling the FP model's next-token distributions (as --tune-params norms); kept only "
                   "if it beats the block-wise model on the held-out samples. Holds the whole model in memory "
                   "(about 6 bytes per weight).")
@click.option("--calib-samples", type=click.IntRange(1), default=Options.calib_samples, show_default=True,
              help="Number of calibration sequences.")
@click.option("--calib-tokens", type=click.IntRange(32), default=Options.calib_tokens, show_default=True,
              help="Tokens per calibration sequence.")
@click.option("--calib-held-out", type=click.IntRange(0), default=4, show_default=True,
              help="More calibration sequences, never searched on: the finished model's KL divergence to "
                   "FP on them is checked against plain Q4_0's, and plain Q4_0 is written if AWQ lost "
                   "(both are printed and recorded in OUT's metadata). 0: no check.")
@click.option("--prompts/--no-prompts", default=True, show_default=True,
              help="Self-sampled calibration: start the sequences in turn from the opening of a passage "
                   "(history, science, news, fiction, dialogue, code, maths), continued as plain text, and from "
                   "a short request through the chat template; --no-prompts: from BOS alone, where a code model "
                   "samples only code (Qwen2.5-Coder-0.5B, KLD on WikiText-2: 0.104 vs 0.155).")
@click.option("--clip/--no-clip", default=True, show_default=True,
              help="Search a clipping range for each Q4_0 block of the output matrix, and of the "
                   "decoder blocks (not q/k) that are not compensated.")
@click.option("--compensate/--no-compensate", default=True, show_default=True,
              help="Last, round each linear's weights column by column, pushing each column's error onto "
                   "the columns not yet rounded (GPTQ on the exact Q4_0 grid; llama-quantize reproduces it).")
@click.option("--untie-output", is_flag=True,
              help="Give tied models a separate output matrix so AWQ can scale it "
                   "(costs one more vocab x hidden Q4_0 tensor).")
@click.option("--alpha-steps", "grid", type=int, default=len(DEFAULT_GRID) - 1, show_default=True, callback=_grid,
              help="Scale exponent grid: alpha = 0, 1/N, ..., 1; 0: no scales (plain rounding, clipped and "
                   "compensated if those are on).")
@click.option("--engine", type=click.Choice(ENGINES), default="awq2gguf", show_default=True,
              help="autoawq: AutoAWQ 0.2.9's search instead of ours, same calibration and export "
                   "(install it with `make autoawq`).")
@click.option("--build", type=click.Choice(BUILD_NAMES), default="patched", show_default=True,
              help="Whose llama.cpp samples calibration text, and whose llama-quantize makes OUT (stock: its own "
                   "Q4_0 mixture; patched Q4_0 is written by the converter, as the patched llama-quantize would).")
@THREADS
@click.option("--precision", type=click.Choice(PRECISIONS), default="auto", show_default=True,
              help="The big matrix products' arithmetic (AWQ's search, compensated rounding and block checks; "
                   "block-wise tuning's training steps): bf16 (about twice as fast on CPUs with bf16 matrix "
                   "instructions: AVX-512 BF16, AMX, Arm BF16) or FP32; auto: bf16 where the CPU has them. The "
                   "Q4_0 grid, the factorisations, the optimizer, the held-out checks and whole-model tuning "
                   "stay FP32.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for sampled calibration text.")
def main(model_dir: Path, out: Path, qtype, calib, lora, drop_blocks, drop_blocks_method, drop_list, tune_steps,
         tune_mode, tune_input, tune_lr, tune_params, tune_loss, tune_norms_steps, calib_samples,
         calib_tokens, calib_held_out, prompts, clip, compensate, untie_output, grid, engine, build, threads, precision,
         seed):
    import torch
    from transformers.utils import logging as hf_logging

    torch.set_num_threads(threads)
    hf_logging.disable_progress_bar()  # our own bars cover loading and saving
    opts = Options(qtype=qtype.upper(), calib=calib, lora=lora, drop_blocks=drop_blocks,
                   drop_method=drop_blocks_method, drop_list=drop_list, tune_steps=tune_steps, tune_mode=tune_mode,
                   tune_input=tune_input, tune_lr=tune_lr,
                   tune_params=tune_params, tune_loss=tune_loss, tune_norms_steps=tune_norms_steps,
                   calib_samples=calib_samples,
                   calib_tokens=calib_tokens, calib_held_out=calib_held_out, prompts=prompts, clip=clip,
                   compensate=compensate, untie_output=untie_output, grid=grid, engine=engine, build=build,
                   threads=threads, precision=precision, seed=seed)
    if drop_blocks and drop_list:
        raise click.UsageError("--drop-blocks and --drop-block-list: give one of them")
    if opts.drops_blocks and engine == "autoawq":
        raise click.UsageError("dropping blocks works with --engine awq2gguf only")
    if tune_steps and (engine == "autoawq" or not opts.converter_writes_out):
        raise click.UsageError("--tune-steps trains for the all-Q4_0 file: it needs --qtype Q4_0, --build patched "
                               "and --engine awq2gguf")
    if tune_mode == "blocks" and tune_params == "norms":
        raise click.UsageError("--tune-params norms trains the whole model's norms: it needs --tune-mode model or auto "
                               "(after block-wise tuning: --tune-norms-steps)")
    if tune_norms_steps and (not tune_steps or tune_mode == "model"):
        raise click.UsageError("--tune-norms-steps follows block-wise tuning: it needs --tune-steps and --tune-mode "
                               "blocks or auto")
    started = time.perf_counter()
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TimeRemainingColumn(), console=err, transient=True) as progress:
        summary = run(model_dir, out, opts, RichProgress(progress))
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
        err.print(f"norms end to end (peak lr {summary.norms_lr:.3g}): distillation loss "
                  f"{summary.norms_losses[0]:.4f} -> {summary.norms_losses[-1]:.4f}{check}")
    if summary.check_untuned_kld is not None:
        verdict = "kept" if summary.tune_kept else "[red]lost: kept the untuned model[/]"
        err.print(f"check of tuning on held-out calibration: KLD to FP {summary.check_tuned_kld:.4f} vs untuned "
                  f"{summary.check_untuned_kld:.4f}: {verdict}")
    if summary.check_kld is not None:
        verdict = "[red]lost: wrote plain Q4_0[/]" if summary.fell_back else "kept"
        err.print(f"check on held-out calibration: KLD to FP {summary.check_kld:.4f} vs plain Q4_0 "
                  f"{summary.check_plain_kld:.4f}: {verdict}")
    size = out.stat().st_size / 2**20
    err.print(f"[bold]wrote {out}[/] ({size:.1f} MiB, {qtype.upper()}) in {time.perf_counter() - started:.0f} s")
