"""AWQ over a whole model, block by block, as in the AWQ paper and AutoAWQ, then compensated rounding.

The first block's input is captured once from calibration tokens. For each block: its linears'
inputs are captured in one FP forward (as Gram matrices), every scaling group's scales are
searched on them and folded into the FP weights (the function is unchanged), then every linear is
rounded with error compensation (compensate.py, GPTQ on the Q4_0 grid), or, where that does not
pay, each Q4_0 block's clipping is searched. Each is kept only where it lowers the block's real
output error with all its linears quantized (guard.py: the groups' own errors can all go down
while the block's goes up). The next block's input is the output of this block with Q4_0
fake-quantized weights, so later blocks learn to live with the errors of earlier ones. An untied
output matrix is done last, through the final norm, judged by the KL divergence of the
next-token distribution. Each part gets its weights when its turn comes and saves them when done
(forward.Weights), so the model need not be in memory as a whole.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..progress import OnProgress, no_progress
from .. import grids
from .compensate import compensate
from .fold import fold_scales
from .forward import (RESIDENT, BlockKwargs, Weights, first_block_input, output_modules, products_in, run,
                      run_fake_quantized)
from .layout import Layout, ScaleGroup, layout_of
from .guard import kl_divergence, log_prob_steps, log_probs
from .search import DEFAULT_GRID, InputStats, apply_clip, search_clip, search_scales


@dataclass(frozen=True)
class GroupResult:
    layer: int
    group: str
    alpha: float        # the searched alpha (kept or not)
    error: float        # the group's own output error with it
    plain_error: float  # ... and with plain Q4_0
    kept: bool = True   # False: the block's (or the output's) real error was lower without it


@dataclass
class AwqResult:
    groups: list[GroupResult]
    clipped: list[bool]  # per decoder block, then the output matrix: clipping kept
    compensated: list[bool]  # per decoder block, then the output matrix: compensated rounding kept
    block_errors: list[tuple[float, float]]  # per block: (chosen, plain) squared output error


def _input_stats(layer: nn.Module, layout: Layout, x: torch.Tensor, kwargs: BlockKwargs,
                 products: torch.dtype) -> tuple[dict[nn.Linear, InputStats], torch.Tensor]:
    """Statistics of the input of every linear, from one FP forward of the layer (its products in
    `products`), and its output."""
    stats = {}
    sites = layout.input_sites(layer)

    def hook(module, args, _out):
        stats[module] = InputStats.of(args[0], products)

    hooks = [site.register_forward_hook(hook) for site in sites]
    try:
        with products_in(products):
            y = run(layer, x, kwargs).float()
    finally:
        for h in hooks:
            h.remove()
    return {linear: stats[site] for site, linears in sites.items() for linear in linears}, y


class _Block:
    """One decoder layer whose scales and clips can be tried and taken back: every candidate
    starts from the layer's FP weights, and is scored by the block's output error with all its
    linears quantized, on the first samples of the calibration batch (y: the FP layer's output
    for the batch)."""

    def __init__(self, layer: nn.Module, x: torch.Tensor, y: torch.Tensor, kwargs: BlockKwargs, n_objective: int,
                 products: torch.dtype, stats: dict[nn.Linear, InputStats]):
        self.layer, self.products = layer, products
        # The FP inputs' imatrix entries, of the linears whose file has them.
        self.importance = {linear: s.importance() for linear, s in stats.items() if grids.weighs(linear)}
        n = min(n_objective, x.shape[0])
        self.x, self.y_ref, self.kwargs = x[:n], y[:n], kwargs.for_batch(x.shape[0], n)
        self.original = [p.detach().clone() for p in layer.parameters()]

    def configure(self, groups: list[ScaleGroup], scales: list[torch.Tensor | None], clips: dict | None = None,
                  weights: dict | None = None) -> None:
        """The FP weights with these groups' scales folded, these clips, then these linears' weights
        replaced (the compensated rounding of the former)."""
        for p, w in zip(self.layer.parameters(), self.original):
            p.data.copy_(w)
        for group, s in zip(groups, scales):
            if s is not None:
                fold_scales(group, s)
        for linear, c in (clips or {}).items():
            apply_clip(linear, c)
        for linear, w in (weights or {}).items():
            linear.weight.data.copy_(w)
        for linear, importance in self.importance.items():  # of x / s where s is folded into the linear
            for group, s in zip(groups, scales):
                if s is not None and any(c is linear for c in group.consumers):
                    importance = importance / s.pow(2)
            grids.set_importance(linear, importance)

    def error(self) -> float:
        return (run_fake_quantized(self.layer, self.x, self.kwargs, self.products) - self.y_ref).pow(2).mean().item()


def _compensated(layer: nn.Module, layout: Layout, stats: dict[nn.Linear, InputStats]
                 ) -> dict[nn.Linear, torch.Tensor]:
    """Every linear's compensated rounding; linears that share an input are done as one matrix
    (rows are independent, and the Hessian is the same)."""
    weights = {}
    for linears in layout.input_sites(layer).values():
        rounded = compensate(torch.cat([l.weight for l in linears]), stats[linears[0]])
        weights.update(zip(linears, rounded.split([l.out_features for l in linears])))
    return weights


def _choose_block(layer: nn.Module, layout: Layout, x: torch.Tensor, kwargs: BlockKwargs, grid, clip: bool,
                  compensated: bool, i: int, n_objective: int, products: torch.dtype
                  ) -> tuple[list[GroupResult], bool, bool, tuple[float, float]]:
    """Search every group's scales on the FP inputs (as AutoAWQ does), then keep only what lowers
    the block's real output error: drop groups one at a time while that helps, then compensate the
    rounding if that helps, else clip if that helps. Plain rounding is the starting point's rival,
    so the block never ends worse than it. A compensated block is not clipped: clipped first,
    compensation takes the clipped weights as its target, which shrinks the block's output; the
    shrinkage has the same sign in every block and adds up, which a block's own error cannot see
    (bench/results/README.md, Compensated blocks are not clipped)."""
    stats, y = _input_stats(layer, layout, x, kwargs, products)
    groups = layout.scale_groups(layer)
    choices = [search_scales(stats[g.consumers[0]], g.consumers, grid, g.writes_residual) for g in groups]
    block = _Block(layer, x, y, kwargs, n_objective, products, stats)
    block.configure(groups, [None] * len(groups))
    plain = block.error()
    kept = [c.alpha > 0 for c in choices]
    chosen = lambda keep: [c.scales if k else None for c, k in zip(choices, keep)]
    block.configure(groups, chosen(kept))
    best = block.error()
    for j in range(len(groups)):
        if kept[j]:
            trial = [k and n != j for n, k in enumerate(kept)]
            block.configure(groups, chosen(trial))
            if (e := block.error()) < best:
                kept, best = trial, e
    block.configure(groups, chosen(kept))
    if best > plain:
        kept, best = [False] * len(groups), plain
        block.configure(groups, chosen(kept))
    for group, c, k in zip(groups, choices, kept):
        if k:
            for linear in group.consumers:
                stats[linear] = stats[linear].scaled(c.scales)
    clipped = False
    compensated = compensated and all(grids.grid_of(linear).clips_and_compensates for linear in stats)
    if compensated:
        block.configure(groups, chosen(kept), weights=_compensated(layer, layout, stats))
        if (e := block.error()) < best:
            best = e
        else:
            compensated = False
            block.configure(groups, chosen(kept))
    clip_targets = [linear for linear in layout.clip_targets(layer) if grids.grid_of(linear).clips_and_compensates]
    if clip and not compensated and clip_targets:
        clips = {linear: search_clip(stats[linear], linear) for linear in clip_targets}
        block.configure(groups, chosen(kept), clips)
        if (e := block.error()) < best:
            clipped, best = True, e
        else:
            block.configure(groups, chosen(kept))
    results = [GroupResult(i, g.name, c.alpha, c.error, c.plain_error, k) for g, c, k in zip(groups, choices, kept)]
    return results, clipped, compensated, (best, plain)


def output_is_tied(model: nn.Module) -> bool:
    return model.get_output_embeddings().weight is model.get_input_embeddings().weight


def _choose_output(model: nn.Module, h: torch.Tensor, grid, clip: bool, compensated: bool,
                   n_objective: int, products: torch.dtype) -> tuple[list[GroupResult], bool, bool]:
    """The output matrix: scales through the final norm, and compensated rounding (untied only:
    either would change the embeddings' rows too), and clipping, each kept only if it lowers the
    KL divergence of the next-token distribution (FP head on the same hidden states) on the
    objective samples. Clipping is scored without being applied, so a tied model, which has
    nothing else to try, needs no snapshot of its vocabulary-wide matrix to go back to. Unlike a
    block's, the output's clipping stays before its compensation: the KL divergence sees the
    model's end result, and no later block adds to a shrinkage here."""
    norm, head = output_modules(model)
    tied = output_is_tied(model)
    h_obj = h[:n_objective]
    ref = log_probs(h_obj, norm, head, quantize_head=False)
    score = lambda clip=None: kl_divergence(ref, log_prob_steps(h_obj, norm, head, True, clip))
    stats = InputStats.of(norm(h), products)
    grids.set_importance(head, stats.importance())
    best = score()
    results = []
    if not tied:
        kept_norm, kept_head = norm.weight.detach().clone(), head.weight.detach().clone()

        def keep_if_better() -> bool:
            """Keep the weights as they are if they score better than the last kept, else go back."""
            nonlocal best
            if (e := score()) < best:
                best = e
                kept_norm.copy_(norm.weight)
                kept_head.copy_(head.weight)
                return True
            norm.weight.data.copy_(kept_norm)
            head.weight.data.copy_(kept_head)
            return False

        choice = search_scales(stats, [head], grid)
        kept = False
        if choice.alpha > 0:
            fold_scales(ScaleGroup("output", norm, [head], norm_offset=layout_of(model).norm_offset), choice.scales)
            grids.set_importance(head, stats.importance(choice.scales))
            if kept := keep_if_better():
                stats = stats.scaled(choice.scales)
            else:
                grids.set_importance(head, stats.importance())
        results.append(GroupResult(len(model.model.layers), "output", choice.alpha, choice.error,
                                   choice.plain_error, kept))
    clipped = False
    refined = grids.grid_of(head).clips_and_compensates
    if clip and refined:  # tied too: the embedding rows are the same Q4_0 blocks, clipped or not
        clips = search_clip(stats, head)
        if clipped := (e := score(clips)) < best:
            best = e
            apply_clip(head, clips)
            if not tied:
                kept_head.copy_(head.weight)
    compensated = compensated and not tied and refined
    if compensated:
        compensate(head.weight, stats, out=head.weight)
        compensated = keep_if_better()
    return results, clipped, compensated


@torch.no_grad()
def apply_awq(model: nn.Module, input_ids: torch.Tensor, grid=DEFAULT_GRID, clip: bool = True,
              compensated: bool = True, on_progress: OnProgress = no_progress,
              objective_samples: int = 4, weights: Weights = RESIDENT,
              products: torch.dtype = torch.float32) -> AwqResult:
    """Search and fold AWQ scales (clipping, compensated rounding) into `model`, in place, from
    calibration `input_ids` (samples, tokens); each choice is kept only where the block's (or the
    output's) real error on the first `objective_samples` samples goes down. Each part gets its
    weights from `weights` when its turn comes and is saved there when done."""
    x, kwargs = first_block_input(model, input_ids, weights)
    layout = layout_of(model)
    result = AwqResult([], [], [], [])
    for i, layer in enumerate(model.model.layers):
        weights.load(layer)
        groups, clipped, comp, errors = _choose_block(layer, layout, x, kwargs, grid, clip, compensated, i,
                                                      objective_samples, products)
        result.groups += groups
        result.clipped.append(clipped)
        result.compensated.append(comp)
        result.block_errors.append(errors)
        x = run_fake_quantized(layer, x, kwargs, products)
        weights.save(layer)
        on_progress(i + 1)
    outputs = output_modules(model)
    if not grids.grid_of(outputs[1]).searched:  # nothing to search on Q8_0's grid, 16 times finer
        groups, clipped, comp = [], False, False
    else:
        weights.load(*outputs)
        groups, clipped, comp = _choose_output(model, x, grid, clip, compensated, objective_samples, products)
        weights.save(*outputs)
    result.groups += groups
    result.clipped.append(clipped)
    result.compensated.append(comp)
    return result
