"""ggml's Q8_0 quantizer in torch, bit for bit, as a fake-quantizer (grids.Q8_0).

quantize_row_q8_0_ref: blocks of 32 along the input dimension, d = (largest magnitude) / 127, q =
roundf(x * (1 / d)) (halves away from zero), d stored as FP16 (the rounding uses the FP32 d).
"""

from __future__ import annotations

import torch

from .q4_0 import BLOCK


def q8_0_fake_quant(w: torch.Tensor) -> torch.Tensor:
    """Q8_0 round trip of w (..., K), K a multiple of 32, computed in FP32; returns w's dtype."""
    if w.shape[-1] % BLOCK:
        raise ValueError(f"Q8_0 needs rows that are a multiple of {BLOCK} long, got {w.shape[-1]}")
    blocks = w.reshape(-1, BLOCK).float()
    d = blocks.abs().amax(dim=1, keepdim=True) / 127
    x = blocks * torch.where(d == 0, torch.zeros_like(d), 1 / d)
    q = x.sign() * (x.abs() + 0.5).floor()
    return (q * d.half().float()).reshape(w.shape).to(w.dtype)
