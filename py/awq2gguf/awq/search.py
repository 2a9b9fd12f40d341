"""AWQ's two searches, both against ggml's exact quantizers: per-channel scales, then clipping.

Scales: for a group of linears fed by the same input x, try s = mean|x|^alpha per input channel
for each alpha of the grid, quantize W * s on each linear's own grid (grids.grid_of: the type the
GGUF stores it in, weighted by the imatrix entry of x / s where the file has one), undo s, and keep
the alpha whose outputs x @ W_q^T are closest (mean squared error) to the FP outputs x @ W^T.
alpha = 0 (s = 1) is plain rounding.

Clipping (Q4_0 only): for each Q4_0 block (one row, 32 input columns) try shrinking its range to a fraction
of its largest magnitude and keep the fraction with the smallest error in that block's share of
the output (as AutoAWQ does per group, cross terms between blocks are left out).

Both errors come from a factor of the inputs' Gram matrix x^T x (InputStats), so their cost does
not grow with the amount of calibration text.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import torch
from torch import nn

from .. import grids
from ..q4_0 import BLOCK, q4_0_fake_quant

DEFAULT_GRID = tuple(i / 20 for i in range(21))
# Fractions of each block's largest magnitude to try (AutoAWQ: 20 steps, at most half cut off).
CLIP_GRID = tuple(1 - i / 20 for i in range(10))
# The searches quantize matrices this many rows at a time: a vocabulary-wide output matrix would
# otherwise need several transient copies of itself.
ROWS_PER_STEP = 8192
# The scale search judges a matrix on evenly spaced rows, as many as cost this many multiply-adds
# per evaluation but at least SEARCH_MIN_ROWS: its error is a mean over rows. A 0.5B's matrices are
# searched whole but for its vocabulary-wide output (every 5th row: whole, it was the slowest;
# bench/results/README.md, Faster compensation and search toward a 7B); a 7B's gate and up
# projections on every 5th row. Rows that write the residual stream are always judged whole
# (ScaleGroup.writes_residual).
SEARCH_MACS = 25e9
SEARCH_MIN_ROWS = 4096


@dataclass
class InputStats:
    """What the searches need to know about a linear's input x (tokens, features).

    factor is any R with R^T R = x^T x (the Gram matrix): x itself when there are fewer tokens
    than features (no Gram to compute, and cheaper to use), else the Cholesky factor of x^T x.
    An output error ||x D^T||^2 is then ||R D^T||^2, whatever the number of tokens.

    The search's error products multiply in `products` (modes.Precision); the factor and the Gram
    matrices stay FP32: a bf16 product is rounded to bf16, and that rounding of an outlier channel's
    diagonal entry can exceed the rounding's damping (a Cholesky failed on SmolLM2).
    """
    factor: torch.Tensor  # (min(tokens, features), features)
    mean: torch.Tensor    # mean |x| per feature
    n_tokens: int
    products: torch.dtype = torch.float32

    @classmethod
    @torch.no_grad()
    @torch.autocast("cpu", enabled=False)  # called from hooks inside bf16 forwards: the Gram stays FP32
    def of(cls, x: torch.Tensor, products: torch.dtype = torch.float32) -> "InputStats":
        x = x.reshape(-1, x.shape[-1]).float()
        n, k = x.shape
        return cls(x.clone() if n <= k else _gram_factor(gram(x)), x.abs().mean(dim=0), n, products)

    def scaled(self, s: torch.Tensor) -> "InputStats":
        """Statistics of x / s, the input once s is folded into the producer."""
        return InputStats(self.factor / s, self.mean / s, self.n_tokens, self.products)

    @cached_property
    def _factor_t(self) -> torch.Tensor:
        return self.factor.T.to(self.products)

    def gram(self) -> torch.Tensor:
        """x^T x."""
        return gram(self.factor)

    def error(self, d: torch.Tensor) -> float:
        """Mean over tokens and rows of the squared output error of a weight error d (rows, features)."""
        return (d.to(self.products) @ self._factor_t).float().pow(2).sum().item() / (self.n_tokens * d.shape[0])

    def importance(self, s: torch.Tensor | None = None) -> torch.Tensor:
        """Mean of x^2 per feature (of x / s, where a scale s is folded into the consumer): the imatrix
        entry llama-imatrix would collect for this input."""
        mean_square = self.factor.pow(2).sum(0) / self.n_tokens
        return mean_square if s is None else mean_square / s.pow(2)

    def block_grams(self) -> torch.Tensor:
        """The (blocks, 32, 32) diagonal blocks of x^T x: each Q4_0 block's own inputs."""
        r = self.factor.reshape(self.factor.shape[0], -1, BLOCK).transpose(0, 1)
        return r.transpose(1, 2) @ r


# Column bands of gram(): the bands on and above the diagonal cost (1 + 1/GRAM_BANDS) / 2 of the
# whole product (bench/results/README.md, AWQ: ways to make an all-Q4_0 development model).
GRAM_BANDS = 4


def gram(a: torch.Tensor) -> torch.Tensor:
    """a^T a (a: rows, features), computed a band of columns at a time on and above the diagonal
    only, and mirrored: a^T @ a would not know that the result is symmetric."""
    k = a.shape[1]
    out = torch.empty(k, k, dtype=a.dtype)
    edges = [k * i // GRAM_BANDS for i in range(GRAM_BANDS + 1)]
    for lo, hi in zip(edges, edges[1:]):
        band = a[:, lo:hi].T @ a[:, lo:]
        out[lo:hi, lo:] = band
        out[hi:, lo:hi] = band[:, hi - lo:].T
    return out


def _gram_factor(x_gram: torch.Tensor) -> torch.Tensor:
    """Upper-triangular R with R^T R = x_gram, up to a jitter of 1e-7 of its mean diagonal when a
    channel is dead or duplicated (the Gram matrix is then only semi-definite)."""
    jitter = 0.0
    eye = torch.eye(x_gram.shape[0])
    for _ in range(8):
        l, info = torch.linalg.cholesky_ex(x_gram + jitter * eye)
        if info == 0:
            return l.T
        jitter = max(jitter * 10, 1e-7 * x_gram.diagonal().mean().item())
    raise ValueError("the calibration inputs' Gram matrix is not positive semi-definite")


@dataclass(frozen=True)
class ScaleChoice:
    scales: torch.Tensor
    alpha: float
    error: float       # output MSE with the chosen scales
    plain_error: float  # output MSE of plain Q4_0 (alpha = 0)


def scales_for(x_mean: torch.Tensor, alpha: float) -> torch.Tensor:
    """mean|x|^alpha, normalised so that max * min = 1 (keeps weights in range either way)."""
    s = x_mean.clamp(min=1e-4).pow(alpha)
    return s / (s.max() * s.min()).sqrt()


@torch.no_grad()
def output_error(stats: InputStats, consumers: list[nn.Linear], s: torch.Tensor, every_row: bool = False) -> float:
    """Mean squared output error of the consumers with round_trip(W * s) / s in place of W, on each
    one's grid (estimated on evenly spaced rows of a matrix too big to judge whole within
    SEARCH_MACS, unless every_row)."""
    err = 0.0
    for linear in consumers:
        weight = linear.weight[::1 if every_row else _search_row_step(linear.weight, stats)]
        n_rows, grid = weight.shape[0], grids.grid_of(linear)
        importance = stats.importance(s) if grids.weighs(linear) else None
        for w in weight.split(ROWS_PER_STEP):
            w = w.float()
            err += stats.error(w - grid.fake_quant(w * s, importance) / s) * w.shape[0] / n_rows
    return err


def _search_row_step(weight: torch.Tensor, stats: InputStats) -> int:
    """Every how many rows output_error takes one of weight's: each row costs a product with the
    statistics' factor."""
    rows, cols = weight.shape
    return math.ceil(rows / max(SEARCH_MIN_ROWS, SEARCH_MACS / (cols * stats.factor.shape[0])))


@torch.no_grad()
def search_scales(stats: InputStats, consumers: list[nn.Linear], grid=DEFAULT_GRID,
                  every_row: bool = False) -> ScaleChoice:
    """Every other grid point first, then the two neighbours of the best one: the error is smooth
    in alpha at that scale, and this halves the cost, which is the bulk of AWQ's time."""
    plain = output_error(stats, consumers, torch.ones_like(stats.mean), every_row)
    errors = {}

    def evaluate(i: int) -> None:
        if 0 <= i < len(grid) and i not in errors:
            errors[i] = plain if grid[i] == 0 else output_error(stats, consumers, scales_for(stats.mean, grid[i]),
                                                                every_row)

    for i in [*range(0, len(grid), 2), len(grid) - 1]:
        evaluate(i)
    coarse_best = min(errors, key=errors.get)
    evaluate(coarse_best - 1)
    evaluate(coarse_best + 1)
    best = min(errors, key=errors.get)
    return ScaleChoice(scales_for(stats.mean, grid[best]), grid[best], errors[best], plain)


@torch.no_grad()
def search_clip(stats: InputStats, linear: nn.Linear, grid=CLIP_GRID, rows_per_step: int = ROWS_PER_STEP) -> torch.Tensor:
    """Per-block clip values (rows, blocks): clamping each block to +-value minimises its output error."""
    gram_blocks = stats.block_grams()
    w = linear.weight.float()
    out = torch.empty(w.shape[0], w.shape[1] // BLOCK)
    for start in range(0, w.shape[0], rows_per_step):
        blocks = w[start:start + rows_per_step].reshape(-1, w.shape[1] // BLOCK, BLOCK)
        peak = blocks.abs().amax(dim=-1)
        best_err = torch.full_like(peak, float("inf"))
        best = peak.clone()
        for ratio in grid:
            c = (peak * ratio).unsqueeze(-1)
            d = blocks - q4_0_fake_quant(torch.minimum(torch.maximum(blocks, -c), c))
            # Per block: d^T G_bb d, as a batched matmul over blocks.
            err = ((d.transpose(0, 1) @ gram_blocks) * d.transpose(0, 1)).sum(-1).T
            better = err < best_err
            best_err = torch.where(better, err, best_err)
            best = torch.where(better, peak * ratio, best)
        out[start:start + rows_per_step] = best
    return out


def clamp_blocks(w: torch.Tensor, clip: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """w (rows, cols) with each Q4_0 block clamped to +-its clip value (rows, blocks)."""
    c = clip.unsqueeze(-1).to(w.dtype)
    blocks = w.view(w.shape[0], -1, BLOCK)
    return torch.clamp(blocks, -c, c, out=None if out is None else out.view_as(blocks)).view_as(w)


@torch.no_grad()
def apply_clip(linear: nn.Linear, clip: torch.Tensor) -> None:
    """Clamp each Q4_0 block of linear's weight to +-its clip value, in place (no temporary copy:
    for a vocabulary-sized output matrix that was awq2gguf's peak memory)."""
    clamp_blocks(linear.weight, clip, out=linear.weight)
