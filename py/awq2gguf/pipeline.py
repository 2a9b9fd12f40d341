"""awq2gguf's main job: HF folder -> (LoRA merge) -> calibration -> (dropping blocks) -> AWQ search -> (tuning) -> folded FP weights -> GGUF -> quantized GGUF.

Everything in between lives in a work folder beside OUT (same file system, so the final rename
is atomic) that is removed at the end, whatever happens: OUT appears complete or not at all.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from gguf import GGMLQuantizationType

from . import __version__, calibration, checkpoint, lora, metadata, prune, quality, tune, tune_blocks
from .awq.plan import Planned, apply_plan, clear_importance, importance_entries
from .grids import Q4_0, Q8_0, Grid
from .grids.imatrix import write_imatrix
from .grids.plan import bytes_of
from .builds import get_build
from .convert import convert_hf_to_gguf
from .host import available_memory, resolve_precision
from .errors import Awq2ggufError
from .metadata import Key
from .modes import Engine, OutputType, Precision, QType, Quality, TuneInput, TuneMode, TuneParams
from .options import Options
from .progress import NoProgress, Progress
from .q4_0 import BLOCK
from .llama_quantize import quantize
from .streamed import Saved, StreamedModel

# Bytes per weight of the work files at their peak: the folded model as its Q4_0 when the
# converter writes OUT (Options.converter_writes_out), else the folded model in FP32 and the F32
# GGUF made of it for llama-quantize. Before either, self-sampled calibration makes an all-Q4_0 GGUF.
SAMPLING_BYTES_PER_WEIGHT = 18 / 32
FOLDED_AS_Q4_0_BYTES_PER_WEIGHT = 18 / 32
FOLDED_AS_FP32_BYTES_PER_WEIGHT = 8
# A LoRA merge writes the merged model in F16 first, kept until the end.
MERGED_BYTES_PER_WEIGHT = 2
# In the work folder: the held-out tokens' FP log-probabilities, on disk until the final check
# ((tokens, vocab) is 0.3 GB for a 152k vocabulary).
REFERENCE_FILE = "reference.pt"


class NotEnoughDisk(Awq2ggufError):
    pass


@dataclass
class Summary:
    out: Path
    calibration: str = ""
    precision: str = ""  # opts.precision resolved: fp32 or bf16
    mean_alpha: float | None = None  # over the groups kept
    groups_kept: tuple[int, int] | None = None  # (kept, searched) scaling groups
    clipped: tuple[int, int] | None = None  # (blocks and output matrix clipped, all of them)
    compensated: tuple[int, int] | None = None  # (blocks and output matrix compensated, all of them)
    block_error_ratio: float | None = None  # chosen / plain block output error, summed over blocks
    check_kld: float | None = None  # KLD to FP on the held-out samples, of AWQ's weights (tuned if that won)
    check_plain_kld: float | None = None  # ... and of plain rounding (no imatrix)
    check_untuned_kld: float | None = None  # with tuning: of AWQ's weights before it
    check_tuned_kld: float | None = None  # ... and after
    fell_back: bool = False  # AWQ lost the check: OUT is plain rounding of the original weights
    output_q8_0_bytes: int | None = None  # --output-type q8_0: the bytes it adds to the all-Q4_0 file
    types: dict[str, int] = field(default_factory=dict)  # the plan: matrices per ggml type
    fallbacks: list[str] = field(default_factory=list)  # the plan's fallbacks for row lengths, said as llama.cpp does
    dropped: prune.Dropped | None = None
    tune_mode: TuneMode | None = None  # model or blocks (tune.choose_mode), None: no tuning
    tune_why: str = ""  # ... and why
    tune_lr_grid: float | None = None  # the peak learning rate in Q4_0 grid steps: --tune-lr, else the mode's
    tune_losses: list[float] = field(default_factory=list)  # whole-model: distillation loss of each step
    tune_lr: float | None = None  # whole-model: the peak learning rate in weight units (tune_lr_grid grid steps)
    tuned_blocks: list[tune_blocks.BlockResult] = field(default_factory=list)  # block-wise: each block, in order
    norms_losses: list[float] = field(default_factory=list)  # then the norms end to end: each step's loss
    norms_lr: float | None = None  # ... their peak learning rate in weight units
    norms_output: bool = False  # ... a tied output matrix trained with them (--tune-norms-output)
    check_blocks_kld: float | None = None  # held-out KLD to FP after block-wise tuning
    check_norms_kld: float | None = None  # ... and after the norms' end-to-end tuning too

    @property
    def norms_kept(self) -> bool:
        """The norms' end-to-end tuning beat the block-wise model on the held-out check (or no check)."""
        return self.check_norms_kld is None or self.check_norms_kld < self.check_blocks_kld

    @property
    def tune_kept(self) -> bool:
        """Tuning beat the untuned model on the held-out check (or there was no check)."""
        return self.check_tuned_kld is None or self.check_tuned_kld < self.check_untuned_kld


def provenance(opts: Options, calib: calibration.Calibration, summary: Summary,
               adapter: lora.Adapter | None = None) -> dict[str, str]:
    """GGUF metadata (llama-quantize --override-kv) saying how the file was made (metadata.Key)."""
    fields = {
        Key.VERSION: __version__,
        Key.ENGINE: opts.engine,
        Key.CALIBRATION_SOURCE: calib.source,
        Key.CALIBRATION_SAMPLES: calib.n_samples,
        Key.CALIBRATION_SEARCH_SAMPLES: quality.searched(opts),
        Key.CALIBRATION_TOKENS: calib.n_tokens,
        Key.ALPHA_GRID: f"{opts.grid[0]:g}..{opts.grid[-1]:g} ({len(opts.grid)} points)",
        Key.GROUP_SIZE: BLOCK,
        Key.CLIP: opts.clip,
        Key.COMPENSATE: opts.compensate,
        Key.UNTIE_OUTPUT: opts.untie_output,
        Key.OUTPUT_TYPE: opts.output_type,
        Key.PRECISION: summary.precision or None,
        Key.CHECK_KLD: summary.check_kld,
        Key.CHECK_PLAIN_KLD: summary.check_plain_kld,
        Key.CHECK_UNTUNED_KLD: summary.check_untuned_kld,
        Key.CHECK_TUNED_KLD: summary.check_tuned_kld,
    }
    if summary.check_kld is not None:
        fields |= {Key.CHECK_TOKENS: calib.held_out_ids.numel(), Key.CHECK_FELL_BACK: summary.fell_back}
    if adapter is not None:
        fields |= {Key.LORA_NAME: adapter.name, Key.LORA_RANK: adapter.rank, Key.LORA_SHA256: adapter.sha256()}
    if summary.dropped is not None:
        fields |= {
            Key.DROP_BLOCKS_METHOD: summary.dropped.method,
            Key.DROP_BLOCKS_BLOCKS: summary.dropped.blocks,
            # before any removal, then after each
            Key.DROP_BLOCKS_CALIB_PPL: [summary.dropped.ppl_before, *summary.dropped.ppl],
        }
    if summary.tune_mode is not None:
        fields |= {
            Key.TUNE_MODE: summary.tune_mode,
            Key.TUNE_STEPS: opts.tune_steps,  # block-wise: per block
            Key.TUNE_LR: summary.tune_lr_grid,  # in Q4_0 grid steps
            Key.TUNE_KEPT: summary.tune_kept,  # false: OUT is the untuned model
            Key.TUNE_SCALES: opts.tune_scales,
        }
    if summary.tune_losses:
        fields |= {
            Key.TUNE_LR_WEIGHTS: summary.tune_lr,  # the same in weight units
            Key.TUNE_PARAMS: opts.tune_params,
            Key.TUNE_LOSS: opts.tune_loss,
            Key.TUNE_LOSSES: [summary.tune_losses[0], summary.tune_losses[-1]],  # the first step's and the last's
        }
    if summary.tuned_blocks:
        fields |= {Key.TUNE_INPUT: opts.tune_input, Key.TUNE_BLOCKS_KEPT: sum(b.kept for b in summary.tuned_blocks)}
    if summary.norms_losses:
        fields |= {
            Key.TUNE_NORMS_STEPS: len(summary.norms_losses),
            Key.TUNE_NORMS_LR_WEIGHTS: summary.norms_lr,
            Key.TUNE_NORMS_LOSSES: [summary.norms_losses[0], summary.norms_losses[-1]],
            Key.TUNE_NORMS_OUTPUT: summary.norms_output,
            Key.TUNE_NORMS_KEPT: summary.norms_kept,
        }
    return metadata.overrides(fields)


def _calibrate(model_dir: Path, tokenizer, n_vocab: int, opts: Options, work: Path, progress: Progress
               ) -> calibration.Calibration:
    if opts.calib is not None:
        with progress.stage(f"calibration text from {opts.calib.name}"):
            calib = calibration.from_file(tokenizer, opts.calib, opts.calib_samples, opts.calib_tokens,
                                          opts.calib_held_out)
        calibration.check_vocabulary(calib.input_ids, n_vocab)
        return calib
    n = opts.calib_samples + opts.calib_held_out
    prompts = calibration.prompt_ids(tokenizer, n, opts.calib_tokens) if opts.prompts else None
    calibration.check_vocabulary(prompts or [], n_vocab)
    # All-Q4_0, not Q8_0 or F16: the sampler reads the fewest bytes per token, in the patched kernels.
    with progress.stage("all-Q4_0 GGUF for sampling calibration text"):
        source = convert_hf_to_gguf(model_dir, work / "source-q4_0.gguf", "q4_0")
    try:
        with progress.stage(f"sampling {opts.calib_samples} + {opts.calib_held_out} x {opts.calib_tokens} "
                            "calibration tokens", opts.calib_tokens) as done:
            return calibration.generated(get_build(opts.build), source, opts.calib_samples, opts.calib_tokens,
                                         opts.seed, opts.threads, on_progress=done,
                                         n_held_out=opts.calib_held_out, prompts=prompts)
    finally:
        source.unlink(missing_ok=True)


def _search_tune_and_check(streamed: StreamedModel, calib: calibration.Calibration, opts: Options, work: Path,
                           progress: Progress, summary: Summary, teacher: tune.Teacher | None,
                           planned: list[Planned]) -> Path:
    """Our engine: the AWQ search, then (summary.tune_mode) tuning with the teacher (whole model) or
    block by block; the held-out checks, undoing what lost them; the folded folder. A file of 8- and
    16-bit matrices only has nothing to search."""
    if not any(p.choice.grid.searched for p in planned):
        with progress.stage("writing the model"):
            return streamed.write_folder()
    held_out = calib.held_out_ids
    summary.precision = resolve_precision(opts.precision)
    if len(held_out):
        _check_plain(streamed, held_out, work, progress, summary)
    _search(streamed, calib, opts, progress, summary)
    untuned = None
    if summary.tune_mode is not None:
        untuned = _tune_searched(streamed, calib, opts, work, progress, summary, teacher)
    if len(held_out):
        _check_written(streamed, held_out, work, progress, summary)
        _undo_what_lost(streamed, untuned, summary, planned)
    with progress.stage("writing the folded model"):
        return streamed.write_folder()


def _check_plain(streamed: StreamedModel, held_out, work: Path, progress: Progress, summary: Summary) -> None:
    """Plain rounding's KLD to FP on the held-out tokens; the FP log-probabilities stay on disk for the
    later checks (the unpruned model's, if run() saved them before dropping blocks)."""
    import torch

    from .awq.forward import model_log_probs
    from .awq.guard import kl_divergence

    model, saved = streamed.model, work / REFERENCE_FILE
    with progress.stage(f"FP and plain-rounding log-probabilities of {held_out.numel()} held-out tokens"):
        if saved.exists():
            reference, (plain,) = torch.load(saved), model_log_probs(model, held_out, (True,), streamed)
        else:
            reference, plain = model_log_probs(model, held_out, (False, True), streamed)
            torch.save(reference, saved)
        summary.check_plain_kld = kl_divergence(reference, plain)
        del reference, plain


def _search(streamed: StreamedModel, calib: calibration.Calibration, opts: Options, progress: Progress,
            summary: Summary) -> None:
    """AWQ's scales, clipping and compensated rounding, block by block, and what the search kept."""
    from .awq.apply import apply_awq
    from .awq.forward import PRODUCTS

    model = streamed.model
    with progress.stage(f"AWQ search, block by block ({summary.precision} products)", len(model.model.layers)) as done:
        result = apply_awq(model, calib.spread_ids(quality.searched(opts)), opts.grid, opts.clip, opts.compensate,
                           on_progress=done, weights=streamed, products=PRODUCTS[summary.precision])
    kept = [g for g in result.groups if g.kept]
    summary.mean_alpha = sum(g.alpha for g in kept) / len(kept) if kept else 0.0
    summary.groups_kept = (len(kept), len(result.groups))
    summary.clipped = (sum(result.clipped), len(result.clipped))
    summary.compensated = (sum(result.compensated), len(result.compensated))
    summary.block_error_ratio = sum(e for e, _ in result.block_errors) / sum(p for _, p in result.block_errors)


def _tune_searched(streamed: StreamedModel, calib: calibration.Calibration, opts: Options, work: Path,
                   progress: Progress, summary: Summary, teacher: tune.Teacher | None) -> Saved:
    """Tune the searched model in summary.tune_mode (checking it on the held-out tokens first); the
    branch that holds the untuned model."""
    if len(calib.held_out_ids):
        with progress.stage("checking the untuned model on the held-out tokens"):
            summary.check_untuned_kld = _check_kld(streamed.model, calib.held_out_ids, streamed, work)
    untuned = streamed.branch(work / "tuned")
    if summary.tune_mode == TuneMode.MODEL:
        summary.tune_losses, summary.tune_lr = _tune(streamed, calib, teacher, opts.tune_params, opts.tune_steps,
                                                     summary.tune_lr_grid, opts, progress,
                                                     tune.trains_tied_output(streamed.model, opts.tune_params))
    else:
        _tune_blocks(streamed, calib, opts, progress, summary)
        if opts.tune_norms_steps:
            _tune_norms(streamed, calib, teacher, opts, work, progress, summary)
    return untuned


def _check_written(streamed: StreamedModel, held_out, work: Path, progress: Progress, summary: Summary) -> None:
    """The final model's KLD to FP on the held-out tokens (and, with tuning, the tuned model's)."""
    if summary.check_norms_kld is not None:  # _tune_norms checked the model it kept
        summary.check_kld = summary.check_norms_kld if summary.norms_kept else summary.check_blocks_kld
    else:
        with progress.stage("checking the whole model on the held-out tokens"):
            summary.check_kld = _check_kld(streamed.model, held_out, streamed, work)
    (work / REFERENCE_FILE).unlink()
    if summary.tune_mode is not None:
        summary.check_tuned_kld = summary.check_kld


def _undo_what_lost(streamed: StreamedModel, untuned: Saved | None, summary: Summary, planned: list[Planned]) -> None:
    """Tuning that made the model worse on text it never saw is undone; if then the search lost too,
    OUT is what plain rounding (without an imatrix, as checked) makes of the original."""
    if summary.tune_mode is not None and not summary.tune_kept:
        streamed.restore(untuned)
        summary.check_kld = summary.check_untuned_kld
    if summary.check_kld >= summary.check_plain_kld:
        summary.fell_back = True
        streamed.reset()
        clear_importance(planned)


def _save_reference(streamed: StreamedModel, held_out, path: Path, progress: Progress) -> None:
    import torch

    from .awq.forward import model_log_probs

    with progress.stage(f"FP log-probabilities of {held_out.numel()} held-out tokens, before dropping blocks"):
        (reference,) = model_log_probs(streamed.model, held_out, (False,), streamed)
        torch.save(reference, path)


def _check_kld(model, held_out, streamed: StreamedModel, work: Path) -> float:
    """KLD to FP on the held-out tokens of the model as saved, through its grids' round trip."""
    import torch

    from .awq.forward import model_log_probs
    from .awq.guard import kl_divergence

    (folded,) = model_log_probs(model, held_out, (True,), streamed)
    return kl_divergence(torch.load(work / REFERENCE_FILE), folded)


def _grids(opts: Options) -> str:
    """What the tuning trains through, as its stage says it."""
    return "Q4_0" if opts.qtype == QType.Q4_0 else f"{opts.qtype}'s grids"


def _tune(streamed: StreamedModel, calib: calibration.Calibration, teacher: tune.Teacher, params: TuneParams, steps: int,
          lr_grid: float, opts: Options, progress: Progress, tied_output: bool) -> tuple[list[float], float]:
    """Tune the folded model's `params` (and with tied_output its tied output matrix: the caller's
    tune.trains_tied_output), all in memory, and save what trained; each step's loss and the peak
    learning rate in weight units."""
    model = streamed.model
    with progress.stage("loading the folded model for tuning"):
        streamed.load(*streamed.parts)
    lr = lr_grid * tune.grid_step(model.model.layers)
    trained = ("every block matrix" if params == TuneParams.ALL else "the norms and biases") + (
        " and the tied output matrix" if tied_output else "")
    scales = ", scales learned" if opts.tune_scales and (params == TuneParams.ALL or tied_output) else ""
    with progress.stage(f"tuning {trained} through {_grids(opts)}{scales} ({opts.tune_loss})", steps) as done:
        losses = tune.tune(model, calib.search_ids, teacher, steps, lr, params, opts.tune_loss, opts.seed,
                           on_progress=done, tied_output=tied_output, scales=opts.tune_scales)
    trained_parts = [*model.model.layers, model.model.norm] + ([streamed.embed] if tied_output else [])
    streamed.save(*trained_parts)  # saving releases them
    streamed.release(streamed.embed, streamed.head)  # what did not train goes unsaved
    return losses, lr


def _tune_blocks(streamed: StreamedModel, calib: calibration.Calibration, opts: Options, progress: Progress,
                 summary: Summary) -> None:
    """Tune the folded model one decoder block at a time, saving each block that beat its untuned self."""
    n_layers, steps = len(streamed.model.model.layers), opts.tune_steps
    scales = ", scales learned" if opts.tune_scales else ""
    with progress.stage(f"tuning {n_layers} blocks through {_grids(opts)}{scales}, {steps} steps each (input: {opts.tune_input}, "
                        f"{summary.precision})", n_layers * steps) as done:
        summary.tuned_blocks = tune_blocks.tune_blocks(
            streamed.model, calib.search_ids, calib.held_out_ids, steps, summary.tune_lr_grid, streamed, streamed.original(),
            opts.tune_input == TuneInput.QUANTIZED, opts.seed, summary.precision == Precision.BF16,
            opts.tune_scales, on_progress=done)


def _tune_norms(streamed: StreamedModel, calib: calibration.Calibration, teacher: tune.Teacher, opts: Options,
                work: Path, progress: Progress, summary: Summary) -> None:
    """After block-wise tuning, the whole model's norms and biases end to end against the teacher,
    kept only where they beat the block-wise model on the held-out tokens."""
    held_out = calib.held_out_ids
    if len(held_out):
        with progress.stage("checking the block-wise tuned model on the held-out tokens"):
            summary.check_blocks_kld = _check_kld(streamed.model, held_out, streamed, work)
    blockwise = streamed.branch(work / "norms")
    summary.norms_output = tune.trains_tied_output(streamed.model, TuneParams.NORMS, opts.tune_norms_output)
    summary.norms_losses, summary.norms_lr = _tune(streamed, calib, teacher, TuneParams.NORMS, opts.tune_norms_steps,
                                                   tune.LR, opts, progress, summary.norms_output)
    if len(held_out):
        with progress.stage("checking the tuned norms on the held-out tokens"):
            summary.check_norms_kld = _check_kld(streamed.model, held_out, streamed, work)
        if not summary.norms_kept:
            streamed.restore(blockwise)


def _drop_blocks(streamed: StreamedModel, calib: calibration.Calibration, opts: Options,
                 progress: Progress) -> prune.Dropped:
    """Choose the blocks to drop (or take the given ones) on the calibration tokens, and drop them."""
    model, ids, n_layers = streamed.model, calib.search_ids, len(streamed.model.model.layers)
    if opts.drop_list:
        what, passes = f"dropping blocks {', '.join(map(str, opts.drop_list))} of {n_layers}", 1
        choose = partial(prune.given, model, ids, list(opts.drop_list), streamed)
    else:
        what = f"choosing {opts.drop_blocks} of {n_layers} blocks to drop ({opts.drop_method})"
        passes = prune.passes(opts.drop_method, opts.drop_blocks)
        choose = partial(prune.choose, model, ids, opts.drop_blocks, opts.drop_method, streamed)
    with progress.stage(f"{what}: {passes} passes over the blocks", passes * n_layers) as done:
        dropped = choose(done)
    streamed.drop_blocks(dropped.blocks)
    return dropped


def _check_disk(streamed: StreamedModel, out: Path, opts: Options, planned: list[Planned]) -> None:
    """Fail before the slow work if OUT's file system cannot hold the work files and OUT."""
    folded = FOLDED_AS_Q4_0_BYTES_PER_WEIGHT if opts.converter_writes_out else FOLDED_AS_FP32_BYTES_PER_WEIGHT
    sampling = SAMPLING_BYTES_PER_WEIGHT if opts.calib is None else 0
    # the held-out tokens' FP16 log-probabilities over the vocabulary, kept until the check
    reference = opts.calib_held_out * opts.calib_tokens * streamed.embed.num_embeddings * 2
    merged = MERGED_BYTES_PER_WEIGHT if opts.lora is not None else 0
    # the tuned model beside the untuned one until the check (and the tuned norms' beside both)
    tuned = folded * (1 + bool(opts.tune_norms_steps)) if opts.tune_steps else 0
    out_bytes = bytes_of({p.matrix: p.choice for p in planned})
    needed = streamed.n_params() * (merged + max(sampling, folded + tuned)) + out_bytes + reference
    free = shutil.disk_usage(out.parent).free
    if free < needed:
        raise NotEnoughDisk(f"not enough free disk beside {out}: this model needs about {needed / 2**30:.1f} GiB "
                            f"(temporary files and OUT), {free / 2**30:.1f} GiB are free")


def run(model_dir: Path, out: Path, opts: Options, progress: Progress = NoProgress()) -> Summary:
    model_dir, out = Path(model_dir), Path(out)
    checkpoint.architecture(model_dir)  # fail before any slow work
    adapter = lora.read_adapter(opts.lora) if opts.lora is not None else None
    build = get_build(opts.build)
    if not out.parent.is_dir():
        raise checkpoint.CheckpointError(f"the folder of {out} does not exist")
    summary = Summary(out)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.work-", dir=out.parent))
    try:
        # First: a missing or corrupt shard, or too little disk, fails before any slow work.
        streamed = _streamed(model_dir, work, opts)
        opts = _resolve_quality(streamed, opts, progress)
        planned = _plan(streamed, opts, progress, summary)
        _check_disk(streamed, out, opts, planned)
        if opts.tune_steps:
            _plan_tuning(streamed, opts, progress, summary)
        if opts.drops_blocks:
            prune.check(len(streamed.model.model.layers), list(opts.drop_list or range(opts.drop_blocks)))
        if adapter is not None:
            model_dir, streamed = _merge_lora(model_dir, streamed, adapter, opts, work, progress)
            planned = _plan(streamed, opts)
        tokenizer = checkpoint.load_tokenizer(model_dir)
        calib = _calibrate(model_dir, tokenizer, streamed.embed.num_embeddings, opts, work, progress)
        summary.calibration = f"{calib.source}, {calib.n_samples} x {calib.n_tokens} tokens"
        teacher = _before_dropping_blocks(streamed, calib, opts, work, progress, summary)
        if opts.drops_blocks:
            summary.dropped = _drop_blocks(streamed, calib, opts, progress)
        if opts.engine == Engine.AUTOAWQ:
            from .engines import autoawq

            with progress.stage("AutoAWQ search (export_compatible)"):
                folded = autoawq.search_and_fold(model_dir, tokenizer, calib, opts, work / "folded")
        else:
            folded = _search_tune_and_check(streamed, calib, opts, work, progress, summary, teacher, planned)
        _write_out(folded, out, build, opts, work, progress, provenance(opts, calib, summary, adapter), planned)
        return summary
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _resolve_quality(streamed: StreamedModel, opts: Options, progress: Progress) -> Options:
    """The job's settings spelled out (quality.resolve); with --quality best, said with the time they should take."""
    n_params = streamed.n_params()
    resolved = quality.resolve(opts, n_params)
    if opts.quality == Quality.FAST:
        return resolved
    n_block_params = sum(p.numel() for p in streamed.model.model.layers.parameters())
    progress.note(quality.chosen(resolved, n_params, n_block_params))
    return resolved


def _plan(streamed: StreamedModel, opts: Options, progress: Progress | None = None,
          summary: Summary | None = None) -> list[Planned]:
    """Each matrix's type in OUT, put on its module (awq.plan); with a summary, the plan and its
    fallbacks said there (and in the progress log), and what --output-type q8_0 costs."""
    output_type = GGMLQuantizationType.Q8_0 if opts.output_type == OutputType.Q8_0 else None
    planned = apply_plan(streamed.model, opts.qtype, opts.uses_imatrix, output_type)
    if summary is None:
        return planned
    for p in planned:
        summary.types[p.choice.qtype.name] = summary.types.get(p.choice.qtype.name, 0) + 1
    moves = {}
    for p in planned:
        if (was := p.choice.fallback_from) is not None:
            moves.setdefault((was, p.choice.qtype, p.matrix.n_per_row), []).append(p.matrix.name)
    for (was, now, n), names in moves.items():
        summary.fallbacks.append(f"{len(names)} matrices with rows of {n} ({names[0]}"
                                 f"{', ...' if len(names) > 1 else ''}) do not take {was.name}'s blocks of "
                                 f"{Grid.of(was).block}: {now.name} instead, as llama-quantize falls back")
        progress.note(f"{opts.qtype}: {summary.fallbacks[-1]}")
    if output_type is not None:
        out = next(p.matrix for p in planned if p.choice.qtype == output_type and p.matrix.role in ("output", "token_embd"))
        summary.output_q8_0_bytes = Q8_0.bytes(out.n_rows * out.n_per_row) - Q4_0.bytes(out.n_rows * out.n_per_row)
    return planned


def _plan_tuning(streamed: StreamedModel, opts: Options, progress: Progress, summary: Summary) -> None:
    """The tuning mode and peak learning rate, said once; whether the norms' tuning after it fits."""
    summary.tune_mode, summary.tune_why = tune.choose_mode(opts.tune_mode, opts.tune_params, streamed.n_params(),
                                                           available_memory())
    default_lr = tune.LR if summary.tune_mode == TuneMode.MODEL else tune_blocks.LR
    summary.tune_lr_grid = default_lr if opts.tune_lr is None else opts.tune_lr
    progress.note(f"tuning {'the whole model' if summary.tune_mode == TuneMode.MODEL else 'block by block'}: "
                  f"{summary.tune_why}")
    if opts.tune_norms_steps:
        if summary.tune_mode == TuneMode.MODEL:
            progress.note("--tune-norms-steps: not run, whole-model tuning trains the norms already")
        else:
            tied = streamed.embed.weight.numel() if tune.trains_tied_output(streamed.model, TuneParams.NORMS,
                                                                            opts.tune_norms_output) else 0
            tune.check_norms_fit(streamed.n_params(), available_memory(), tied)


def _merge_lora(model_dir: Path, streamed: StreamedModel, adapter: lora.Adapter, opts: Options, work: Path,
                progress: Progress) -> tuple[Path, StreamedModel]:
    """The merged model's folder, and the model streamed from it."""
    with progress.stage(f"merging the LoRA adapter {adapter.name} (rank {adapter.rank})",
                        len(streamed.parts)) as done:
        merged = lora.merge(model_dir, adapter, work / "merged", on_progress=done)
    return merged, _streamed(merged, work, opts)


def _streamed(model_dir: Path, work: Path, opts: Options) -> StreamedModel:
    return StreamedModel(model_dir, work / "folded", opts.untie_output, as_q4_0=opts.converter_writes_out)


def _before_dropping_blocks(streamed: StreamedModel, calib: calibration.Calibration, opts: Options, work: Path,
                            progress: Progress, summary: Summary) -> tune.Teacher | None:
    """What tuning needs of the whole model before blocks are dropped: the teacher (for tuning the
    whole model or the norms end to end), and with dropped blocks the held-out tokens' FP
    log-probabilities, so that the held-out checks measure against what the tuning distils (the
    whole model, not the pruned one, which the tuned model moves away from)."""
    teacher = None
    if summary.tune_mode == TuneMode.MODEL or (summary.tune_mode == TuneMode.BLOCKS and opts.tune_norms_steps):
        with progress.stage(f"FP next-token distributions of {calib.search_ids.numel()} tuning tokens"):
            teacher = tune.teacher(streamed.model, calib.search_ids, streamed)
    if summary.tune_mode is not None and opts.drops_blocks and calib.held_out_ids.numel():
        _save_reference(streamed, calib.held_out_ids, work / REFERENCE_FILE, progress)
    return teacher


def _write_out(folded: Path, out: Path, build, opts: Options, work: Path, progress: Progress,
               made_how: dict[str, str], planned: list[Planned]) -> None:
    """OUT from the folded folder: written by the converter (all-Q4_0, the matrices the plan puts in
    another type named to it), or through an F32 GGUF and the build's llama-quantize, with the
    imatrix the search weighed its errors by."""
    if opts.converter_writes_out:
        tensor_types = {p.matrix.name: p.choice.qtype.name.lower() for p in planned if p.choice.grid is not Q4_0}
        with progress.stage("writing the Q4_0 GGUF (vendored convert_hf_to_gguf.py)"):
            convert_hf_to_gguf(folded, out, "q4_0", made_how, tensor_types)
    else:
        with progress.stage("converting to an F32 GGUF (vendored convert_hf_to_gguf.py)"):
            # F32, so llama-quantize sees exactly the weights the search quantized.
            f32 = convert_hf_to_gguf(folded, work / "folded-f32.gguf", "f32")
        shutil.rmtree(folded)
        entries = importance_entries(planned)
        args = ("--imatrix", str(write_imatrix(work / "imatrix.dat", entries))) if entries else ()
        with progress.stage(f"quantizing to {opts.qtype} ({build.name} llama-quantize"
                            f"{', imatrix of the search' if entries else ''})"):
            quantize(build, f32, out, opts.qtype, opts.threads, extra_args=args, metadata=made_how)
