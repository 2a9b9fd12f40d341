"""Q4_0 weights saved as a GPTQ checkpoint's tensors, which the vendored converter dequantizes exactly.

The folded model must reach the converter without a full-size FP32 copy on disk (28 GB for a 7B).
Q4_0 is a 4-bit GPTQ layout with group size 32 along the input dimension, symmetric, zero point
8: what the converter computes from `qweight`, `qzeros`, `scales` and `g_idx` is FP16(d) x (q - 8),
exactly the values ggml's Q4_0 dequantizes to, and its Q4_0 quantizer turns those values back into
the same d and q (the block's largest value is -8 x FP16(d), so d comes back exactly, and every
other value is an integer multiple of it). Blocks whose d is 0 are stored with d = +0, so that
they dequantize to +0 and come back as ggml writes an all-zero block (d = -0, every q 8) whatever
the zeros' signs. The one difference changes no value: a block whose d rounds to 0 in FP16 (all
|w| < 2.4e-7) is written as an all-zero block rather than with the q of its FP32 values.
"""

from __future__ import annotations

import torch

from .q4_0 import BLOCK, q4_0_dequantize, q4_0_quantize

# config.json's description, as GPTQ checkpoints have it ("gptq": stored zero points are 1 less).
QUANTIZATION_CONFIG = {"quant_method": "gptq", "bits": 4, "group_size": BLOCK, "sym": True,
                       "desc_act": False, "checkpoint_format": "gptq"}
PER_INT32 = 8  # 4-bit values packed in an int32
ROWS_PER_STEP = 8192  # of a vocabulary-wide matrix: the int32 temporaries stay small
SUFFIXES = ("qweight", "qzeros", "scales", "g_idx")  # the tensors one matrix is saved as
ZERO_POINTS = 0x77777777  # eight zero points of 8, each stored as 7 in the "gptq" format
_SHIFTS = torch.arange(0, 32, 4, dtype=torch.int32)


def packable(name: str, w: torch.Tensor) -> bool:
    """A matrix the GGUF has in Q4_0, in a shape the GPTQ layout holds."""
    return (name.endswith(".weight") and w.dim() == 2 and w.shape[1] % BLOCK == 0
            and w.shape[0] % PER_INT32 == 0)


def _pack_nibbles(q: torch.Tensor) -> torch.Tensor:
    """(n, m) values in 0..15 -> (n / 8, m) int32, value 8i + j in bits 4j..4j+3 of row i."""
    q = q.to(torch.int32).reshape(-1, PER_INT32, q.shape[-1])
    return (q << _SHIFTS.view(1, -1, 1)).sum(dim=1, dtype=torch.int32)


def _unpack_nibbles(packed: torch.Tensor) -> torch.Tensor:
    return ((packed.unsqueeze(1) >> _SHIFTS.view(1, -1, 1)) & 15).reshape(-1, packed.shape[-1]).to(torch.uint8)


def _row_steps(n: int) -> list[slice]:
    return [slice(i, min(i + ROWS_PER_STEP, n)) for i in range(0, n, ROWS_PER_STEP)]


def stored_names(name: str) -> list[str]:
    base = name.removesuffix(".weight")
    return [f"{base}.{part}" for part in SUFFIXES]


def pack(name: str, w: torch.Tensor) -> dict[str, torch.Tensor]:
    """The GPTQ tensors of w's Q4_0 (w (out, in), named "....weight")."""
    n_out, n_in = w.shape
    qweight = torch.empty(n_in // PER_INT32, n_out, dtype=torch.int32)
    scales = torch.empty(n_in // BLOCK, n_out, dtype=torch.float16)
    for rows in _row_steps(n_out):
        q, d = q4_0_quantize(w[rows])
        qweight[:, rows] = _pack_nibbles(q.T)
        scales[:, rows] = torch.where(d == 0, 0.0, d).T  # -0 as +0
    qzeros = torch.full((n_in // BLOCK, n_out // PER_INT32), ZERO_POINTS, dtype=torch.int32)
    return dict(zip(stored_names(name), (qweight, qzeros, scales, torch.arange(n_in, dtype=torch.int32) // BLOCK)))


def unpack(name: str, stored: dict[str, torch.Tensor]) -> torch.Tensor:
    """The FP32 values of weight `name` from the tensors pack() made of it (ignores zeros and
    g_idx, which pack() always writes the same)."""
    qweight, _, scales, _ = (stored[n] for n in stored_names(name))
    n_out = qweight.shape[1]
    w = torch.empty(n_out, scales.shape[0] * BLOCK)
    for rows in _row_steps(n_out):
        w[rows] = q4_0_dequantize(_unpack_nibbles(qweight[:, rows]).T, scales[:, rows].T)
    return w
