"""The objectives that keep AWQ from losing to plain rounding, all with every weight Q4_0 fake-quantized.

Each scaling group's search only sees its own linears' outputs; the next ops, the residual
stream and the softmax see something else, and on Qwen2.5-Coder-0.5B that made the whole model
worse than plain Q4_0 although every group's own error went down. So each choice is
checked against plain rounding on what follows it:

- a decoder block: the squared error of the block's output (all its linears quantized) against
  the FP block on the same input;
- the output matrix: the KL divergence of the next-token distribution;
- the whole model: the KL divergence to the FP model on held-out calibration tokens, at the end.
"""

from __future__ import annotations

from typing import Iterable, Iterator

import torch
from torch import nn
from torch.nn import functional as F

from ..grids import fake_quant
from .search import ROWS_PER_STEP, clamp_blocks

# Tokens per step when scoring a vocabulary-wide output: a (tokens, vocab) FP32 block at a time.
TOKENS_PER_STEP = 256


def _logits(x: torch.Tensor, head: nn.Linear, quantize_head: bool, clip: torch.Tensor | None) -> torch.Tensor:
    """x's logits; a quantized head (Q4_0, or Q8_0 where kept so) is quantized ROWS_PER_STEP rows at
    a time (clamped to clip first, if given), so that no quantized or clamped copy of a
    vocabulary-wide matrix exists (for a tied 3B model it would be 1.2 GB)."""
    if not quantize_head:
        return F.linear(x, head.weight, head.bias)
    rows = head.weight.split(ROWS_PER_STEP)
    biases = head.bias.split(ROWS_PER_STEP) if head.bias is not None else [None] * len(rows)
    clips = clip.split(ROWS_PER_STEP) if clip is not None else [None] * len(rows)
    return torch.cat([F.linear(x, fake_quant(head, w if c is None else clamp_blocks(w, c)), b)
                      for w, b, c in zip(rows, biases, clips)], dim=-1)


@torch.no_grad()
def log_prob_steps(hidden: torch.Tensor, norm: nn.Module, head: nn.Linear, quantize_head: bool,
                   clip: torch.Tensor | None = None) -> Iterator[torch.Tensor]:
    """Next-token log-probabilities from final hidden states, TOKENS_PER_STEP tokens at a time
    (tokens, vocab), in FP16 to halve their memory (a 0.5B model's vocabulary is 152k wide); the
    head optionally Q4_0, optionally with each Q4_0 block clamped to +-clip (rows, blocks)."""
    h = norm(hidden.reshape(-1, hidden.shape[-1]))
    for part in h.split(TOKENS_PER_STEP):
        yield F.log_softmax(_logits(part, head, quantize_head, clip).float(), -1).half()


def log_probs(hidden: torch.Tensor, norm: nn.Module, head: nn.Linear, quantize_head: bool) -> torch.Tensor:
    """All of log_prob_steps at once."""
    return torch.cat(list(log_prob_steps(hidden, norm, head, quantize_head)))


def kl_divergence(ref: torch.Tensor, test: torch.Tensor | Iterable[torch.Tensor]) -> float:
    """Mean over tokens of KL(ref || test), both log-probabilities (tokens, vocab); test whole, or
    as log_prob_steps makes it, so that it never exists whole."""
    steps = test.split(TOKENS_PER_STEP) if isinstance(test, torch.Tensor) else test
    total = 0.0
    for r, t in zip(ref.split(TOKENS_PER_STEP), steps, strict=True):
        r, t = r.float(), t.float()
        total += (r.exp() * (r - t)).sum().item()
    return total / ref.shape[0]
