"""Folding AWQ scales into FP weights, so that the unquantized model computes the same function."""

from __future__ import annotations

import torch
from torch import nn

from .layout import ScaleGroup


@torch.no_grad()
def fold_scales(group: ScaleGroup, s: torch.Tensor) -> None:
    """Producer output channels / s, consumer input columns * s (s: one positive value per channel)."""
    producer = group.producer
    if isinstance(producer, nn.Linear):
        producer.weight.div_(s.view(-1, 1).to(producer.weight.dtype))
        if producer.bias is not None:
            producer.bias.div_(s.to(producer.bias.dtype))
    else:  # RMSNorm of Llama/Mistral/Qwen: y = weight * normalised(x)
        producer.weight.div_(s.to(producer.weight.dtype))
    for linear in group.consumers:
        linear.weight.mul_(s.view(1, -1).to(linear.weight.dtype))
