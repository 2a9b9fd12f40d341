"""Error-compensating rounding on ggml's exact Q4_0 grid (GPTQ/OPTQ), for weights llama-quantize rounds.

Plain Q4_0 rounds every weight to its nearest level on its own. GPTQ rounds one input column at a
time and pushes that column's rounding error onto the columns not yet rounded, weighted by the
inverse Hessian H = x^T x of the linear's inputs, so the output error x (W - Q)^T is what gets
minimised rather than each weight's own error (Frantar et al., 2022; Hessian-inverse updates in
lazy batches of 128 columns as there).

The result must survive llama-quantize's round to nearest, which recomputes each block's scale
from its largest magnitude: d = peak / -8. Each block's d is taken as ggml does, from the block's
32 (already updated) weights when its first column comes up, stored as FP16; its peak weight is
then always put on level -8, so the rounded block's largest magnitude is -8 d again and rounding
to nearest gives back exactly the same levels. compensate() returns those dequantized values:
FP weights that Q4_0 reproduces bit for bit.
"""

from __future__ import annotations

import torch

from ..q4_0 import BLOCK
from .search import ROWS_PER_STEP, InputStats

# Columns per lazy batch (GPTQ's choice), a multiple of BLOCK.
COLUMNS_PER_BATCH = 128
# Hessian damping, as a fraction of its mean diagonal. GPTQ's 0.01 fits 16 x 256 calibration tokens
# too closely: on both development models 0.1-0.3 gave lower KLD on text the search never saw.
DAMPING = 0.3


def _inverse_hessian_factor(stats: InputStats) -> torch.Tensor:
    """Upper-triangular U with U^T U = (H + damping)^-1: row i of U, divided by U[i, i], is how
    column i's rounding error spreads onto the columns after it."""
    h = stats.factor.T @ stats.factor
    h.diagonal().add_(DAMPING * h.diagonal().mean().clamp(min=1e-12))
    inverse = torch.cholesky_inverse(torch.linalg.cholesky(h))
    return torch.linalg.cholesky(inverse, upper=True)


def _block_scale(block: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """ggml's Q4_0 scale of each row of block (rows, 32), as FP16-rounded FP32, and where each row's
    peak (first of equal magnitudes) is."""
    peak_at = block.abs().argmax(dim=1)
    d = (block.gather(1, peak_at[:, None]) / -8).half().float()
    return d, peak_at


@torch.no_grad()
def compensate(weight: torch.Tensor, stats: InputStats, out: torch.Tensor | None = None) -> torch.Tensor:
    """GPTQ on the Q4_0 grid for weight (rows, cols) fed by inputs with statistics `stats`; returns
    the dequantized weights (in `out`, which may be weight itself), which ggml's Q4_0 rounding
    leaves exactly as they are. Rows are independent, so a vocabulary-wide matrix goes
    ROWS_PER_STEP rows at a time."""
    u = _inverse_hessian_factor(stats)
    out = torch.empty_like(weight) if out is None else out
    for dst, src in zip(out.split(ROWS_PER_STEP), weight.split(ROWS_PER_STEP)):
        dst.copy_(_compensate_rows(src.to(torch.float32, copy=True), u))
    return out


def _compensate_rows(w: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """compensate() for some rows, w (rows, cols) FP32, updated in place. Errors spread column by
    column within a Q4_0 block, then block by block within a batch, then batch by batch, so most
    of the arithmetic is in matrix products."""
    cols = w.shape[1]
    out = torch.empty_like(w)
    for start in range(0, cols, COLUMNS_PER_BATCH):
        end = min(start + COLUMNS_PER_BATCH, cols)
        batch, u_batch = w[:, start:end], u[start:end, start:end]
        errors = torch.empty_like(batch)
        for b in range(0, end - start, BLOCK):
            d, peak_at = _block_scale(batch[:, b:b + BLOCK])
            inv_d = torch.where(d == 0, torch.zeros_like(d), 1 / d).squeeze(1)
            d, is_peak = d.squeeze(1), peak_at[:, None] == torch.arange(BLOCK)
            for i in range(b, b + BLOCK):
                column = batch[:, i]
                rounded = out[:, start + i]
                torch.trunc(column * inv_d + 8.5, out=rounded)
                rounded.clamp_(0, 15).masked_fill_(is_peak[:, i - b], 0).sub_(8).mul_(d)
                torch.sub(column, rounded, out=errors[:, i]).div_(u_batch[i, i])
                batch[:, i + 1:b + BLOCK].addr_(errors[:, i], u_batch[i, i + 1:b + BLOCK], alpha=-1)
            batch[:, b + BLOCK:] -= errors[:, b:b + BLOCK] @ u_batch[b:b + BLOCK, b + BLOCK:]
        w[:, end:] -= errors @ u[start:end, end:]
    return out
