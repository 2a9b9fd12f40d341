"""The choices of awq2gguf's options, each an enum of str: a member is its own value, so what the
command line takes, the code compares and the GGUF's metadata records stay the same strings."""

from __future__ import annotations

from enum import StrEnum


class Choices(StrEnum):
    @classmethod
    def values(cls) -> tuple[str, ...]:
        """Every member's value, in order (click's choices; `in` on the enum itself refuses a str)."""
        return tuple(m.value for m in cls)


class QType(Choices):
    """The type of OUT, as llama-quantize names it: Q4_0 puts every weight in Q4_0 (the patched
    llama-quantize); the others are llama.cpp's mixtures (grids/plan.py), made by llama-quantize from
    an F32 GGUF, each matrix's scales searched on its own type's grid."""
    Q4_0 = "Q4_0"
    Q4_K_S = "Q4_K_S"
    Q4_K_M = "Q4_K_M"
    Q5_K_M = "Q5_K_M"
    IQ4_XS = "IQ4_XS"
    IQ4_NL = "IQ4_NL"
    Q8_0 = "Q8_0"
    F16 = "F16"

    @classmethod
    def _missing_(cls, value):  # in any case, as --qtype takes them
        return next((m for m in cls if isinstance(value, str) and m.value == value.upper()), None)


# llama.cpp's 4- and 5-bit mixtures of K-quant and IQ4 grids: made with an imatrix, and tuned on them.
MIXTURES = (QType.Q4_K_S, QType.Q4_K_M, QType.Q5_K_M, QType.IQ4_XS, QType.IQ4_NL)


class OutputType(Choices):
    """The output matrix's type in an all-Q4_0 OUT (a tied model's embedding table with it): Q4_0 like
    every other matrix, or Q8_0, the trade AutoRound's gguf:q4_0 makes (more bytes, less error)."""
    Q4_0 = "q4_0"
    Q8_0 = "q8_0"


class Quality(Choices):
    """fast: the default job; best: the settings measured best for the model's size (quality.py)."""
    FAST = "fast"
    BEST = "best"


class Engine(Choices):
    """Whose search makes the scales: ours, or AutoAWQ's (engines/autoawq.py)."""
    AWQ2GGUF = "awq2gguf"
    AUTOAWQ = "autoawq"


class DropMethod(Choices):
    """How blocks to drop are chosen (prune.py): SLEB's greedy search or ShortGPT's ranking."""
    SLEB = "sleb"
    SHORTGPT = "shortgpt"


class TuneMode(Choices):
    """Tuning the whole model at once or one decoder block at a time; auto: the whole model where it
    fits in memory (tune.choose_mode), else block by block."""
    AUTO = "auto"
    MODEL = "model"
    BLOCKS = "blocks"


class TuneParams(Choices):
    """What trains: the matrices, norms and biases; or the norms and biases only."""
    ALL = "all"
    NORMS = "norms"


class TuneLoss(Choices):
    """The distillation loss per token: averaged (kl) or weighted by the teacher's cross-entropy (tsld)."""
    KL = "kl"
    TSLD = "tsld"


class TuneInput(Choices):
    """Block-wise tuning's input to each block: the tuned model's own, or the FP model's (tune_blocks.py)."""
    QUANTIZED = "quantized"
    FP = "fp"


class Precision(Choices):
    """The arithmetic of a job's big matrix products (AWQ's search, compensated rounding and block
    checks; block-wise tuning's training steps). auto: bf16 where the CPU multiplies bf16 in hardware
    (host.resolve_precision)."""
    AUTO = "auto"
    FP32 = "fp32"
    BF16 = "bf16"
