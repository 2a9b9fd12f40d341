"""AWQ over a whole model, block by block, as in the AWQ paper and AutoAWQ.

The first block's input is captured once from calibration tokens. For each block: its linears'
inputs are captured in one FP forward (as Gram matrices), every scaling group's scales are
searched on them and then folded into the FP weights (the function is unchanged), each Q4_0
block's clipping is searched and applied, and the next block's input is the output of this
block with Q4_0 fake-quantized weights, so later blocks learn to live with the errors of earlier
ones. An untied output matrix is scaled last, through the final norm.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn

from ..q4_0 import q4_0_fake_quant
from .fold import fold_scales
from .layout import ScaleGroup, clip_targets, input_sites, scale_groups
from .search import DEFAULT_GRID, InputStats, apply_clip, search_clip, search_scales


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


def _input_stats(layer: nn.Module, x: torch.Tensor, kwargs: dict) -> dict[nn.Linear, InputStats]:
    """Statistics of the input of every linear, from one FP forward of the layer."""
    stats = {}
    sites = input_sites(layer)

    def hook(module, args, _out):
        stats[module] = InputStats.of(args[0])

    hooks = [site.register_forward_hook(hook) for site in sites]
    try:
        _run(layer, x, kwargs)
    finally:
        for h in hooks:
            h.remove()
    return {linear: stats[site] for site, linears in sites.items() for linear in linears}


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


def _search_and_fold(groups: list[ScaleGroup], stats: dict[nn.Linear, InputStats], grid, layer: int) -> list[GroupResult]:
    """Search every group on the FP inputs first, then fold them all (as AutoAWQ does)."""
    choices = [search_scales(stats[g.consumers[0]], g.consumers, grid) for g in groups]
    results = []
    for group, choice in zip(groups, choices):
        fold_scales(group, choice.scales)
        for linear in group.consumers:
            stats[linear] = stats[linear].scaled(choice.scales)
        results.append(GroupResult(layer, group.name, choice.alpha, choice.error, choice.plain_error))
    return results


def output_is_tied(model: nn.Module) -> bool:
    return model.get_output_embeddings().weight is model.get_input_embeddings().weight


@torch.no_grad()
def apply_awq(model: nn.Module, input_ids: torch.Tensor, grid=DEFAULT_GRID, clip: bool = True,
              on_layer: Callable[[int], None] = lambda i: None) -> list[GroupResult]:
    """Search and fold AWQ scales (and clipping) into `model`, in place, from calibration
    `input_ids` (samples, tokens). The output matrix gets scales too when it is not tied to the
    token embeddings (a scale there would change the embeddings' rows too)."""
    x, kwargs = _first_block_input(model, input_ids)
    results = []
    for i, layer in enumerate(model.model.layers):
        stats = _input_stats(layer, x, kwargs)
        results += _search_and_fold(scale_groups(layer), stats, grid, i)
        if clip:
            for linear in clip_targets(layer):
                apply_clip(linear, search_clip(stats[linear], linear))
        x = _run_fake_quantized(layer, x, kwargs)
        on_layer(i)
    head = model.get_output_embeddings()
    stats = {head: InputStats.of(model.model.norm(x))}
    if not output_is_tied(model):
        results += _search_and_fold([ScaleGroup("output", model.model.norm, [head])], stats, grid,
                                    len(model.model.layers))
    if clip:  # tied too: the embedding rows are the same Q4_0 blocks, clipped or not
        apply_clip(head, search_clip(stats[head], head))
    return results
