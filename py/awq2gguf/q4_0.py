"""ggml's Q4_0 quantizer in torch, bit for bit: as a fake-quantizer, and as the integers it stores.

AWQ searches scales by the error of the quantizer the weights will really meet, so this mirrors
quantize_row_q4_0_ref exactly: blocks of 32 along the input dimension, d = (the value of largest
magnitude, first one on ties) / -8, q = min(15, trunc(x / d + 8.5)), and d stored as FP16 (the
rounding to 4 bits uses the FP32 d, the dequantization the FP16 one).
"""

from __future__ import annotations

import torch

BLOCK = 32


def _blocks(w: torch.Tensor, scale: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """w's blocks of 32 as (q (blocks, 32) in 0..15 as FP32, d (blocks, 1) in FP16); with scale
    (blocks, 1), each block's d is ggml's times its scale (in (0, 1]: a grid that clips the block)."""
    if w.shape[-1] % BLOCK:
        raise ValueError(f"Q4_0 needs rows that are a multiple of {BLOCK} long, got {w.shape[-1]}")
    blocks = w.reshape(-1, BLOCK).float()
    d = _peak(blocks) / -8
    if scale is not None:
        d = d * scale  # as q4_0_scale_grad takes it
    # In place after the first product: a 7B block is 0.9 GB per temporary.
    return (blocks * _inverse(d)).add_(8.5).trunc_().clamp_(0, 15), d.half()


def _peak(blocks: torch.Tensor) -> torch.Tensor:
    """Each block's value of largest magnitude (blocks, 1), from its largest and smallest (a third of
    the time of argmax over |blocks|); where they tie in magnitude, ggml's strict '<' scan keeps the
    first, as torch.argmax does."""
    high, low = blocks.amax(dim=1, keepdim=True), blocks.amin(dim=1, keepdim=True)
    peak = torch.where(high >= -low, high, low)
    tied = ((high == -low) & (high != 0)).squeeze(1).nonzero().squeeze(1)
    if len(tied):
        peak[tied] = blocks[tied].gather(1, blocks[tied].abs().argmax(dim=1, keepdim=True))
    return peak


def _inverse(d: torch.Tensor) -> torch.Tensor:
    return torch.where(d == 0, torch.zeros_like(d), 1 / d)


def q4_0_quantize(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """What Q4_0 stores of w (..., K), K a multiple of 32: q (..., K) in 0..15 as uint8, and the
    blocks' d (..., K/32) in FP16."""
    q, d = _blocks(w)
    return q.to(torch.uint8).reshape(w.shape), d.reshape(*w.shape[:-1], -1)


def q4_0_dequantize(q: torch.Tensor, d: torch.Tensor) -> torch.Tensor:
    """FP32 values of Q4_0's (q, d), as ggml dequantizes them."""
    return ((q.reshape(-1, BLOCK).float() - 8) * d.reshape(-1, 1).float()).reshape(q.shape)


def q4_0_fake_quant(w: torch.Tensor, scale: torch.Tensor | None = None) -> torch.Tensor:
    """Q4_0 round trip of w (..., K), K a multiple of 32, computed in FP32; returns w's dtype. With
    scale (one per block, in (0, 1]), the blocks' d are ggml's times it: the result is then its own
    exact ggml round trip (its largest magnitude is -8 d), so a GGUF of it holds this grid."""
    q, d = _blocks(w, scale)
    return q.sub_(8).mul_(d.float()).reshape(w.shape).to(w.dtype)


def q4_0_scale_grad(w: torch.Tensor, scale: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """The gradient over each block's scale (blocks, 1) of a loss whose gradient over
    q4_0_fake_quant(w, scale) is grad, as LSQ (Esser et al. 2020) takes it: the rounding passes
    straight through, so a value inside the grid moves by its rounding residual per unit of d, and one
    clamped at the grid's end moves with d."""
    blocks = w.reshape(-1, BLOCK).float()
    base = _peak(blocks) / -8  # d at scale 1
    t = blocks * _inverse(base * scale)  # where each value falls on the grid, in steps from its middle
    level = (t + 8.5).trunc_().clamp_(0, 15).sub_(8)
    inside = (t >= -8.5) & (t < 7.5)
    residual = level.sub_(torch.where(inside, t, torch.zeros_like(t)))
    return (grad.reshape(-1, BLOCK).float() * residual).sum(1, keepdim=True) * base
