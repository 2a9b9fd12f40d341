"""ggml's Q4_0 quantizer as a torch fake-quantizer: quantize, then dequantize, bit for bit.

AWQ searches scales by the error of the quantizer the weights will really meet, so this mirrors
quantize_row_q4_0_ref exactly: blocks of 32 along the input dimension, d = (the value of largest
magnitude, first one on ties) / -8, q = min(15, trunc(x / d + 8.5)), and d stored as FP16 (the
rounding to 4 bits uses the FP32 d, the dequantization the FP16 one).
"""

from __future__ import annotations

import torch

BLOCK = 32


def q4_0_fake_quant(w: torch.Tensor) -> torch.Tensor:
    """Q4_0 round trip of w (..., K), K a multiple of 32, computed in FP32; returns w's dtype."""
    if w.shape[-1] % BLOCK:
        raise ValueError(f"Q4_0 needs rows that are a multiple of {BLOCK} long, got {w.shape[-1]}")
    blocks = w.reshape(-1, BLOCK).float()
    # torch.argmax returns the first of equal maxima, as ggml's strict '<' scan does.
    peak = blocks.gather(1, blocks.abs().argmax(dim=1, keepdim=True))
    d = peak / -8
    inv_d = torch.where(d == 0, torch.zeros_like(d), 1 / d)
    q = torch.trunc(blocks * inv_d + 8.5).clamp(0, 15)
    return ((q - 8) * d.half().float()).reshape(w.shape).to(w.dtype)
