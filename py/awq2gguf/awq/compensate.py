"""Error-compensating rounding on ggml's exact Q4_0 grid (GPTQ/OPTQ), for weights llama-quantize rounds.

Plain Q4_0 rounds every weight to its nearest level on its own. GPTQ rounds one input column at a
time and pushes that column's rounding error onto the columns not yet rounded, weighted by the
Hessian H = x^T x of the linear's inputs, so the output error x (W - Q)^T is what gets minimised
rather than each weight's own error (Frantar et al., 2022; updates in lazy batches of 128 columns
as there). It is computed in the equivalent feedback form (QuIP's LDLQ, Chee et al., 2023,
theorem 6): column j is rounded from w_j + sum over i < j of (w_i - q_i) A_ij, with A the
unit-diagonal upper factor of H = A D A^T. That needs one Cholesky factorisation of H, where
GPTQ's own form needs H's inverse and its factor, the bulk of the rounding's cost at a 7B's width
(bench/results/README.md, Faster compensation and search toward a 7B).

The result must survive llama-quantize's round to nearest, which recomputes each block's scale
from its largest magnitude: d = peak / -8. Each block's d is taken as ggml does, from the block's
32 (already updated) weights when its first column comes up, stored as FP16; its peak weight is
then always put on level -8, so the rounded block's largest magnitude is -8 d again and rounding
to nearest gives back exactly the same levels. compensate() returns those dequantized values:
FP weights that Q4_0 reproduces bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..q4_0 import BLOCK
from .search import ROWS_PER_STEP, InputStats

# Columns per lazy batch (GPTQ's choice), a multiple of BLOCK; a batch feeds its errors to the rest
# of its span, a span to every column after it. With one level, every batch rewrote all the later
# columns (the bulk of the rounding's memory traffic at a 7B's width), in products too narrow for
# bf16 to pay.
COLUMNS_PER_BATCH = 128
COLUMNS_PER_SPAN = 1024
# Hessian damping, as a fraction of its mean diagonal: more than GPTQ's 0.01, which fits 16 x 256
# calibration tokens too closely (bench/results/README.md, Figures that were in code comments).
DAMPING = 0.3


@dataclass(frozen=True)
class Feedback:
    """How rounding errors feed forward for inputs with given statistics. a: upper triangular with
    unit diagonal, H + damping = A D A^T (D diagonal), A_ij (i < j) how much of column i's rounding
    error column j takes on; inverse_blocks: each Q4_0 block's own (32, 32) diagonal block of A,
    inverted (blocks, 32, 32)."""
    a: torch.Tensor
    inverse_blocks: torch.Tensor


def _feedback(stats: InputStats) -> Feedback:
    """A from the Cholesky factor of H with rows and columns reversed, which is H's factor the
    other way round: H = N N^T, N upper. All in the one (cols, cols) matrix of H (1.4 GB for a 7B's
    down projection; with copies, three of them were the job's peak memory): reversed in place,
    factorised in place (LAPACK's own column-major layout is H's transpose, which is H), reversed
    back. A is left column-major; the same values as from copies, bit for bit."""
    h = stats.gram()
    h.diagonal().add_(DAMPING * h.diagonal().mean().clamp(min=1e-12))
    _reverse_in_place(h)
    torch.linalg.cholesky(h.mT, out=h.mT)
    _reverse_in_place(h)
    a = h.mT
    a.div_(a.diagonal().clone())
    diagonal_blocks = a.unflatten(0, (-1, BLOCK)).unflatten(2, (-1, BLOCK)).diagonal(dim1=0, dim2=2).permute(2, 0, 1)
    inverse_blocks = torch.linalg.solve_triangular(
        diagonal_blocks, torch.eye(BLOCK, dtype=a.dtype).expand_as(diagonal_blocks), upper=True, unitriangular=True)
    return Feedback(a, inverse_blocks)


def _reverse_in_place(t: torch.Tensor, chunk: int = 1 << 22) -> None:
    """t.flip(0, 1) for a contiguous matrix, which is its elements in reverse order, without a copy
    of it: the two ends swapped a chunk at a time."""
    flat = t.view(-1)
    n = flat.numel()
    for lo in range(0, n // 2, chunk):
        hi = min(lo + chunk, n // 2)
        front = flat[lo:hi].clone()
        flat[lo:hi] = flat[n - hi:n - lo].flip(0)
        flat[n - hi:n - lo] = front.flip(0)


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
    feedback = _feedback(stats)
    out = torch.empty_like(weight) if out is None else out
    for dst, src in zip(out.split(ROWS_PER_STEP), weight.split(ROWS_PER_STEP)):
        dst.copy_(_compensate_rows(src.float(), feedback, stats.products))
    return out


def _compensate_rows(w: torch.Tensor, feedback: Feedback, products: torch.dtype) -> torch.Tensor:
    """compensate() for some rows, w (rows, cols) FP32, left as it is. Errors feed forward column by
    column within a Q4_0 block, then block by block within a batch, batch by batch within a span,
    then span by span, so most of the arithmetic is in matrix products (the spans' in `products`).
    The work is on the transpose, where a column is contiguous: a column of w itself costs a cache
    line per weight (bench/results/README.md, Faster compensation and search toward a 7B)."""
    a = feedback.a
    w = w.T.contiguous()  # (cols, rows)
    target = w.clone()  # w plus the rounding errors fed forward so far
    out = torch.empty_like(w)
    cols = w.shape[0]
    span_errors = torch.empty(COLUMNS_PER_SPAN, w.shape[1], dtype=w.dtype)
    for span in range(0, cols, COLUMNS_PER_SPAN):
        span_end = min(span + COLUMNS_PER_SPAN, cols)
        for start in range(span, span_end, COLUMNS_PER_BATCH):
            end = min(start + COLUMNS_PER_BATCH, span_end)
            errors = span_errors[start - span:end - span]
            _round_batch(w, target, out, errors, feedback, start, end)
            target[end:span_end] += a[start:end, end:span_end].T @ errors
        errors = span_errors[:span_end - span].to(products)
        target[span_end:] += a[span:span_end, span_end:].to(products).T @ errors
    return out.T


def _round_batch(w: torch.Tensor, target: torch.Tensor, out: torch.Tensor, errors: torch.Tensor, feedback: Feedback,
                 start: int, end: int) -> None:
    """Round columns start:end of target (cols, rows) into out, their errors against w into errors
    (end - start, rows), feeding each block's errors forward within the batch."""
    batch, a_batch = target[start:end], feedback.a[start:end, start:end]
    for b in range(0, end - start, BLOCK):
        block = slice(start + b, start + b + BLOCK)
        # The scale comes from the block as GPTQ's own form has it at this point: the earlier
        # columns' errors compensated by this block and every later column (the feedback
        # form's partial sum compensates with this block's columns alone).
        fed_back = batch[b:b + BLOCK] - w[block]
        d, peak_at = _block_scale((w[block] + feedback.inverse_blocks[block.start // BLOCK].T @ fed_back).T)
        inv_d = torch.where(d == 0, torch.zeros_like(d), 1 / d).squeeze(1)
        d, is_peak = d.squeeze(1), torch.arange(BLOCK)[:, None] == peak_at
        for i in range(b, b + BLOCK):
            rounded = out[start + i]
            torch.trunc(batch[i] * inv_d + 8.5, out=rounded)
            rounded.clamp_(0, 15).masked_fill_(is_peak[i - b], 0).sub_(8).mul_(d)
            torch.sub(w[start + i], rounded, out=errors[i])
            batch[i + 1:b + BLOCK].addr_(a_batch[i, i + 1:b + BLOCK], errors[i])
        batch[b + BLOCK:] += a_batch[b:b + BLOCK, b + BLOCK:].T @ errors[b:b + BLOCK]
