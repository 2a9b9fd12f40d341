"""Grid search of per-channel AWQ scales against ggml's exact Q4_0 quantizer.

For a group of linears fed by the same input x, try s = mean|x|^alpha per input channel for each
alpha of the grid, quantize W * s with Q4_0, undo s, and keep the alpha whose outputs x @ W_q^T
are closest (mean squared error) to the FP outputs x @ W^T. alpha = 0 (s = 1) is plain Q4_0.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..q4_0 import q4_0_fake_quant

DEFAULT_GRID = tuple(i / 20 for i in range(21))


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
def output_error(gram: torch.Tensor, n_tokens: int, consumers: list[nn.Linear], s: torch.Tensor) -> float:
    """Mean squared output error of the consumers with Q4_0(W * s) / s in place of W.

    With D = W - W_q, the error over the tokens x is ||x D^T||^2 = sum((D @ x^T x) * D), so the
    Gram matrix x^T x (features^2) replaces the tokens: the cost no longer grows with the amount
    of calibration text.
    """
    err = 0.0
    for linear in consumers:
        w = linear.weight.float()
        d = w - q4_0_fake_quant(w * s) / s
        err += ((d @ gram) * d).sum().item() / (n_tokens * w.shape[0])
    return err


@torch.no_grad()
def search_scales(x: torch.Tensor, consumers: list[nn.Linear], grid=DEFAULT_GRID) -> ScaleChoice:
    """x: (tokens, in_features), the input all consumers see."""
    x = x.float()
    gram = x.T @ x
    x_mean = x.abs().mean(dim=0)
    plain = output_error(gram, x.shape[0], consumers, torch.ones_like(x_mean))
    best = None
    for alpha in grid:
        s = scales_for(x_mean, alpha)
        err = plain if alpha == 0 else output_error(gram, x.shape[0], consumers, s)
        if best is None or err < best.error:
            best = ScaleChoice(s, alpha, err, plain)
    return best
