"""AWQ over a whole model, block by block, as in the AWQ paper and AutoAWQ.

The first block's input is captured once from calibration tokens. For each block: its linears'
inputs are captured in one FP forward, every scaling group's scales are searched on them and
then folded into the FP weights (the function is unchanged), and the next block's input is the
output of this block with Q4_0 fake-quantized weights, so later blocks learn to live with the
errors of earlier ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from ..q4_0 import q4_0_fake_quant
from .fold import fold_scales
from .layout import scale_groups
from .search import DEFAULT_GRID, search_scales


@dataclass(frozen=True)
class GroupResult:
    layer: int
    group: str
    alpha: float
    error: float
    plain_error: float


class _Captured(Exception):
    pass


def _first_block_input(model: nn.Module, input_ids: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """(hidden states, keyword arguments) the first decoder layer receives for input_ids."""
    captured = {}

    def hook(_module, args, kwargs):
        captured["x"] = args[0] if args else kwargs.pop("hidden_states")
        captured["kwargs"] = {k: v for k, v in kwargs.items() if k != "hidden_states"}
        raise _Captured

    handle = model.model.layers[0].register_forward_pre_hook(hook, with_kwargs=True)
    try:
        model(input_ids, use_cache=False)
    except _Captured:
        pass
    finally:
        handle.remove()
    return captured["x"], captured["kwargs"]


def _run(layer: nn.Module, x: torch.Tensor, kwargs: dict) -> torch.Tensor:
    out = layer(x, **kwargs)
    return out[0] if isinstance(out, tuple) else out


def _linear_inputs(layer: nn.Module, linears: list[nn.Linear], x: torch.Tensor, kwargs: dict) -> dict:
    """The input each linear sees in one forward of the layer, flattened to (tokens, features)."""
    seen = {}
    hooks = [l.register_forward_hook(lambda m, args, _out: seen.__setitem__(m, args[0].reshape(-1, args[0].shape[-1])))
             for l in linears]
    try:
        _run(layer, x, kwargs)
    finally:
        for h in hooks:
            h.remove()
    return seen


@torch.no_grad()
def _run_fake_quantized(layer: nn.Module, x: torch.Tensor, kwargs: dict) -> torch.Tensor:
    linears = [m for m in layer.modules() if isinstance(m, nn.Linear)]
    saved = [l.weight.data.clone() for l in linears]
    for l in linears:
        l.weight.data = q4_0_fake_quant(l.weight.data)
    try:
        return _run(layer, x, kwargs)
    finally:
        for l, w in zip(linears, saved):
            l.weight.data = w


@torch.no_grad()
def apply_awq(model: nn.Module, input_ids: torch.Tensor, grid=DEFAULT_GRID,
              on_layer: Callable[[int], None] = lambda i: None) -> list[GroupResult]:
    """Search and fold AWQ scales into `model` (in place) using calibration `input_ids` (samples, tokens)."""
    x, kwargs = _first_block_input(model, input_ids)
    results = []
    for i, layer in enumerate(model.model.layers):
        groups = scale_groups(layer)
        inputs = _linear_inputs(layer, [g.consumers[0] for g in groups], x, kwargs)
        choices = [search_scales(inputs[g.consumers[0]], g.consumers, grid) for g in groups]
        for group, choice in zip(groups, choices):
            fold_scales(group, choice.scales)
            results.append(GroupResult(i, group.name, choice.alpha, choice.error, choice.plain_error))
        x = _run_fake_quantized(layer, x, kwargs)
        on_layer(i)
    return results
