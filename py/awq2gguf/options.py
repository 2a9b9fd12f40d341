"""What one awq2gguf job is asked to do: every option, its default and what it may be, declared once.
The command line (cli.py) builds its options from these fields; a job made in Python is checked the same way."""

from __future__ import annotations

import typing
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

from .awq.search import DEFAULT_GRID
from .builds import BUILD_NAMES
from .host import physical_cores
from .modes import (MIXTURES, Choices, DropMethod, Engine, OutputType, Precision, QType, Quality, TuneInput,
                    TuneLoss, TuneMode, TuneParams)


class OptionsError(ValueError):
    """Options that cannot go together, or a value out of its range (the command line says it as a usage error)."""


def _at_least(low: float, *, above: bool = False, **default) -> Any:
    """A field whose value is at least `low` (with `above`: more than it; None is let through), and
    its default (dataclasses.field's default or default_factory)."""
    return field(metadata={"min": low, "above": above}, **default)


@dataclass(frozen=True)
class Options:
    qtype: QType = QType.Q4_0
    calib: Path | None = None  # None: the model samples its own calibration text
    lora: Path | None = None  # a PEFT LoRA adapter folder, merged before anything else
    # blocks to drop before AWQ, chosen by drop_method on the calibration tokens
    drop_blocks: int = _at_least(0, default=0)
    drop_method: DropMethod = DropMethod.SLEB
    drop_list: tuple[int, ...] = ()  # or exactly these blocks
    tune_steps: int = _at_least(0, default=0)  # quantization-aware tuning with distillation after AWQ (tune.py)
    # in Q4_0 grid steps (tune.grid_step); None: the mode's own (Summary.tune_lr_grid)
    tune_lr: float | None = _at_least(0, above=True, default=None)
    tune_params: TuneParams = TuneParams.ALL
    tune_loss: TuneLoss = TuneLoss.KL
    tune_mode: TuneMode = TuneMode.AUTO
    tune_input: TuneInput = TuneInput.QUANTIZED  # block-wise tuning's input to each block
    tune_scales: bool = False  # each Q4_0 block's scale learned beside the weights (tune.ThroughGrid)
    # after block-wise tuning: the whole model's norms and biases, end to end
    tune_norms_steps: int = _at_least(0, default=0)
    tune_norms_output: bool = False  # ... and a tied output matrix with them, through Q4_0
    calib_samples: int | None = _at_least(1, default=None)  # None: the quality's own (quality.resolve)
    search_samples: int | None = _at_least(1, default=None)  # the AWQ search reads N of them, spread; None: all
    calib_tokens: int = _at_least(32, default=256)
    calib_held_out: int = _at_least(0, default=4)  # more samples, never searched on: the final check against plain Q4_0
    prompts: bool = True  # self-sampled text starts from calibration.PROMPTS rather than from BOS
    clip: bool = True
    compensate: bool = True  # GPTQ-style error-compensated rounding after the scales
    imatrix: bool = True  # the K-quant and IQ4 mixtures: llama-quantize weighs errors by the search's own imatrix
    untie_output: bool = False
    output_type: OutputType = OutputType.Q4_0
    quality: Quality = Quality.FAST  # best: quality.resolve sets the calibration and tuning for the model's size
    grid: tuple[float, ...] = DEFAULT_GRID  # the AWQ scale exponents searched
    engine: Engine = Engine.AWQ2GGUF
    build: str = "patched"  # builds.BUILD_NAMES
    threads: int = _at_least(1, default_factory=physical_cores)
    precision: Precision = Precision.AUTO
    seed: int = 0

    def __post_init__(self):
        for name, kind in _CHOICES.items():
            try:
                object.__setattr__(self, name, kind(getattr(self, name)))
            except ValueError:
                raise OptionsError(f"{name} {getattr(self, name)!r} is not one of {', '.join(kind.values())}") from None
        if self.build not in BUILD_NAMES:
            raise OptionsError(f"build {self.build!r} is not one of {', '.join(BUILD_NAMES)}")
        for f in fields(self):
            if (least := minimum(f.name)) is not None:
                _check_range(f.name, getattr(self, f.name), *least)
        self._check_combination()

    def _check_combination(self) -> None:
        if self.drop_blocks and self.drop_list:
            raise OptionsError("--drop-blocks and --drop-block-list: give one of them")
        if self.drops_blocks and self.engine == Engine.AUTOAWQ:
            raise OptionsError("dropping blocks works with --engine awq2gguf only")
        ours = self.engine == Engine.AWQ2GGUF
        if self.output_type == OutputType.Q8_0 and not (ours and self.converter_writes_out):
            raise OptionsError("--output-type q8_0 is for the all-Q4_0 file: it needs --qtype Q4_0, --build patched "
                               "and --engine awq2gguf (the mixtures choose their own output type)")
        for asked, what in ((self.tune_steps, "--tune-steps trains"), (self.quality == Quality.BEST,
                                                                       "--quality best tunes")):
            if asked and not (ours and (self.converter_writes_out or self.qtype in MIXTURES)):
                raise OptionsError(f"{what} on a 4- or 5-bit grid: it needs --engine awq2gguf and --qtype Q4_0 "
                                   f"(with --build patched) or one of {', '.join(q.value for q in MIXTURES)}")
        if self.tune_scales and self.qtype != QType.Q4_0:
            raise OptionsError("--tune-scales learns Q4_0 blocks' scales: it needs --qtype Q4_0")
        if self.quality == Quality.BEST and (self.tune_steps or self.tune_mode != TuneMode.AUTO):
            raise OptionsError("--quality best chooses --tune-steps and --tune-mode: give those or --quality best")
        if self.tune_mode == TuneMode.BLOCKS and self.tune_params == TuneParams.NORMS:
            raise OptionsError("--tune-params norms trains the whole model's norms: it needs --tune-mode model or auto "
                               "(after block-wise tuning: --tune-norms-steps)")
        if self.tune_norms_steps and (not self.tune_steps or self.tune_mode == TuneMode.MODEL):
            raise OptionsError("--tune-norms-steps follows block-wise tuning: it needs --tune-steps and --tune-mode "
                               "blocks or auto")
        if self.tune_scales and not self.tune_steps and self.quality != Quality.BEST:
            raise OptionsError("--tune-scales learns the scales in the tuning: it needs --tune-steps")
        if self.tune_norms_output and not self.tune_norms_steps:
            raise OptionsError("--tune-norms-output trains in the end-to-end tuning: it needs --tune-norms-steps")

    @property
    def drops_blocks(self) -> bool:
        return bool(self.drop_blocks or self.drop_list)

    @property
    def uses_imatrix(self) -> bool:
        """OUT is made with an imatrix: the K-quant and IQ4 mixtures, unless --no-imatrix (Q4_0's
        quantizer would search other scales with one; Q8_0's and F16 ignore it)."""
        return self.imatrix and self.qtype in MIXTURES

    @property
    def converter_writes_out(self) -> bool:
        """All-Q4_0, as the patched llama-quantize makes it: the converter writes that file itself
        (patch 0013), from the folded model kept as Q4_0, with no F32 GGUF in between."""
        return self.qtype == QType.Q4_0 and self.build == "patched"


def _check_range(name: str, value, low: float, above: bool) -> None:
    if value is not None and (value <= low if above else value < low):
        raise OptionsError(f"{name} {value} is not in the range x{'>' if above else '>='}{low}")


# The fields whose values are one of a set of choices, and the enum of each.
_CHOICES = {name: kind for name, kind in typing.get_type_hints(Options).items()
            if isinstance(kind, type) and issubclass(kind, Choices)}
FIELDS = {f.name: f for f in fields(Options)}


def default(name: str) -> Any:
    """Options' default of field `name` as click takes it: the value, or the function that makes it."""
    f = FIELDS[name]
    return f.default_factory if f.default is MISSING else f.default


def minimum(name: str) -> tuple[float, bool] | None:
    """The least value of field `name` and whether it is excluded (`above`), if the field has one."""
    meta = FIELDS[name].metadata
    return (meta["min"], meta["above"]) if "min" in meta else None
