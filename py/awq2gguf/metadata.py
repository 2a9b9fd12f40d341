"""The awq2gguf.* keys of a GGUF's metadata, saying how the file was made: written by the pipeline
(through llama-quantize's or the converter's --override-kv), read back for the chat page and the benches."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from pathlib import Path

from gguf import GGUFReader

PREFIX = "awq2gguf."
# llama.cpp's override holds a string in 128 bytes, its terminator included.
MAX_STR_BYTES = 127

Value = bool | int | float | str | Sequence[float] | None


class Key(StrEnum):
    """Every awq2gguf.* key a job writes, in the order it writes them: the name after PREFIX (the
    member's value), the type the GGUF holds it as (a list of numbers: a comma-separated str), and
    what it says."""

    def __new__(cls, name: str, kind: type, meaning: str):
        key = str.__new__(cls, name)
        key._value_, key.kind, key.meaning = name, kind, meaning
        return key

    @property
    def gguf(self) -> str:
        """The key as the GGUF holds it, PREFIX included."""
        return PREFIX + self

    VERSION = "version", str, "the awq2gguf version that made the file"
    ENGINE = "engine", str, "whose search made the scales (--engine)"
    CALIBRATION_SOURCE = "calibration.source", str, "the calibration text: file:NAME, or generated:seed=S,prompts=N"
    CALIBRATION_SAMPLES = "calibration.samples", int, "calibration sequences (tuning reads them all)"
    CALIBRATION_SEARCH_SAMPLES = "calibration.search_samples", int, "... of them, the N the AWQ search read (spread)"
    CALIBRATION_TOKENS = "calibration.tokens", int, "tokens per calibration sequence"
    ALPHA_GRID = "alpha_grid", str, "the scale exponents searched: FIRST..LAST (N points)"
    GROUP_SIZE = "group_size", int, "weights per Q4_0 block, which share one scale"
    CLIP = "clip", bool, "clipping ranges were searched (--clip)"
    COMPENSATE = "compensate", bool, "rounding pushed each column's error onto the next (--compensate)"
    UNTIE_OUTPUT = "untie_output", bool, "a tied output matrix got its own copy (--untie-output)"
    OUTPUT_TYPE = "output_type", str, "the output matrix's type, a tied one's embeddings too: q4_0 or q8_0"
    PRECISION = "precision", str, "the big matrix products' arithmetic, resolved: fp32 or bf16"
    CHECK_KLD = "check.kld", float, "KLD to FP on the held-out tokens of the weights written (tuned if that won)"
    CHECK_PLAIN_KLD = "check.plain_kld", float, "... of plain Q4_0"
    CHECK_UNTUNED_KLD = "check.untuned_kld", float, "with tuning: ... of AWQ's weights before it"
    CHECK_TUNED_KLD = "check.tuned_kld", float, "with tuning: ... after it"
    CHECK_TOKENS = "check.tokens", int, "held-out tokens the check ran on"
    CHECK_FELL_BACK = "check.fell_back", bool, "AWQ lost the check: the file is plain Q4_0 of the original weights"
    LORA_NAME = "lora.name", str, "the merged LoRA adapter's folder name"
    LORA_RANK = "lora.rank", int, "... its rank"
    LORA_SHA256 = "lora.sha256", str, "... the sha256 of its weights file"
    DROP_BLOCKS_METHOD = "drop_blocks.method", str, "how dropped blocks were chosen: sleb, shortgpt, or given"
    DROP_BLOCKS_BLOCKS = "drop_blocks.blocks", str, "the blocks dropped (0-based, in the unpruned model), in order"
    DROP_BLOCKS_CALIB_PPL = "drop_blocks.calib_ppl", str, "calibration perplexity before any removal, then after each"
    TUNE_MODE = "tune.mode", str, "tuning of the whole model or block by block: model or blocks"
    TUNE_STEPS = "tune.steps", int, "tuning steps (block-wise: per block)"
    TUNE_LR = "tune.lr", float, "tuning's peak learning rate in Q4_0 grid steps"
    TUNE_KEPT = "tune.kept", bool, "tuning won the held-out check (false: the file is the untuned model)"
    TUNE_SCALES = "tune.scales", bool, "tuning learned each Q4_0 block's scale beside the weights"
    TUNE_LR_WEIGHTS = "tune.lr_weights", float, "whole-model tuning's peak learning rate in weight units"
    TUNE_PARAMS = "tune.params", str, "what whole-model tuning trained (--tune-params)"
    TUNE_LOSS = "tune.loss", str, "whole-model tuning's distillation loss (--tune-loss)"
    TUNE_LOSSES = "tune.losses", str, "whole-model tuning's loss at the first step and the last"
    TUNE_INPUT = "tune.input", str, "block-wise tuning's input to each block (--tune-input)"
    TUNE_BLOCKS_KEPT = "tune.blocks_kept", int, "blocks whose block-wise tuning was kept"
    TUNE_NORMS_STEPS = "tune.norms_steps", int, "steps of the norms' end-to-end tuning after block-wise tuning"
    TUNE_NORMS_LR_WEIGHTS = "tune.norms_lr_weights", float, "... its peak learning rate in weight units"
    TUNE_NORMS_LOSSES = "tune.norms_losses", str, "... its loss at the first step and the last"
    TUNE_NORMS_OUTPUT = "tune.norms_output", bool, "... a tied output matrix trained with them, through Q4_0"
    TUNE_NORMS_KEPT = "tune.norms_kept", bool, "... it won the held-out check (false: the block-wise model is kept)"


def _text(value: float | int) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)  # in a list: short


def overrides(fields: Mapping[str, Value]) -> dict[str, str]:
    """{awq2gguf.NAME: "TYPE:VALUE"} (the --override-kv form) of {NAME: value}. A sequence of numbers
    becomes a comma-separated str (an override holds no arrays); a None value is left out."""
    out = {}
    for name, value in fields.items():
        if value is None:
            continue
        if isinstance(value, bool):  # before int: a bool is an int
            typed = f"bool:{str(value).lower()}"
        elif isinstance(value, int):
            typed = f"int:{value}"
        elif isinstance(value, float):
            typed = f"float:{value!r}"  # every digit: the file's float32 is then the nearest to the value
        elif isinstance(value, str):
            typed = "str:" + value.encode()[:MAX_STR_BYTES].decode(errors="ignore")
        elif isinstance(value, Sequence):
            typed = "str:" + ",".join(map(_text, value))
        else:
            raise TypeError(f"metadata {name}: {type(value).__name__} is not a GGUF override type")
        out[PREFIX + name] = typed
    return out


def provenance(model: Path) -> list[tuple[str, str]]:
    """(NAME without the prefix, value as text) of the GGUF's awq2gguf metadata; empty if it has none."""
    def text(value) -> str:
        return f"{value:.4g}" if isinstance(value, float) else str(value)  # float32 fields read back long
    return [(name.removeprefix(PREFIX), text(field.contents())) for name, field in GGUFReader(model).fields.items()
            if name.startswith(PREFIX)]
