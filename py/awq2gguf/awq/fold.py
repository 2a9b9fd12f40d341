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
        producer.weight[group.rows].div_(s.view(-1, 1).to(producer.weight.dtype))
        if producer.bias is not None:
            producer.bias[group.rows].div_(s.to(producer.bias.dtype))
    else:  # RMSNorm: y = (offset + weight) * normalised(x)
        w, offset = producer.weight, group.norm_offset
        if offset:
            w.add_(offset)
        w.div_(s.to(w.dtype))
        if offset:
            w.sub_(offset)
    for linear in group.consumers:
        linear.weight.mul_(s.view(1, -1).to(linear.weight.dtype))
