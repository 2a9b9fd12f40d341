"""Which decoder blocks to drop before AWQ: SLEB's greedy search or ShortGPT's ranking, on the
calibration tokens.

SLEB (Song et al. 2024) removes, N times, the block whose absence costs the least calibration
perplexity. ShortGPT (Men et al. 2024) ranks blocks once by how little they turn their input
(1 - mean cosine of input and output) and removes the N lowest; it is here as the baseline.

Both only need the final hidden states of several variants of the model, each skipping a set of
blocks. `_final_states` runs them all in one pass over the blocks, so each block's weights are
loaded once per pass (the model may be streamed), and variants share one state for as long as
they have skipped the same blocks: a SLEB round over L candidates costs L(L+1)/2 block runs, not
L^2, and the inputs of the blocks before a candidate are computed once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from .awq.forward import RESIDENT, BlockKwargs, Weights, first_block_input, output_modules, run
from .awq.guard import TOKENS_PER_STEP
from .errors import Awq2ggufError
from .modes import DropMethod
from .progress import OnProgress, no_progress


class PruneError(Awq2ggufError):
    pass


@dataclass(frozen=True)
class Dropped:
    method: str  # sleb, shortgpt, or given (the blocks were named)
    blocks: tuple[int, ...]  # indices in the unpruned model, in the order they were removed
    ppl: tuple[float, ...]  # calibration perplexity after each removal
    ppl_before: float  # ... of the unpruned model


def _final_states(model: nn.Module, x: torch.Tensor, kwargs: BlockKwargs, skip_sets: list[frozenset[int]],
                  weights: Weights, on_progress: OnProgress) -> list[torch.Tensor]:
    """The last block's output of each variant of the model that skips one of skip_sets."""
    states = {frozenset(): x}  # blocks skipped so far -> the state of the variants that skipped them
    for i, layer in enumerate(model.model.layers):
        before = frozenset(range(i))
        following = {}
        weights.load(layer)
        for skipped, h in states.items():
            variants = [s for s in skip_sets if s & before == skipped]
            if any(i in s for s in variants):
                following[skipped | {i}] = h
            if any(i not in s for s in variants):
                following[skipped] = run(layer, h, kwargs)
        weights.release(layer)
        states = following
        on_progress(i + 1)
    return [states[s] for s in skip_sets]


def _perplexities(model: nn.Module, input_ids: torch.Tensor, finals: list[torch.Tensor],
                  weights: Weights) -> list[float]:
    """Perplexity of input_ids' next tokens from each variant's final hidden states."""
    norm, head = output_modules(model)
    targets = input_ids[:, 1:].reshape(-1)
    weights.load(norm, head)
    ppl = []
    for h in finals:
        h = norm(h[:, :-1]).reshape(-1, h.shape[-1])
        nll = sum(F.cross_entropy(head(part), t, reduction="sum").item()
                  for part, t in zip(h.split(TOKENS_PER_STEP), targets.split(TOKENS_PER_STEP)))
        ppl.append(math.exp(nll / targets.numel()))
    weights.release(norm, head)
    return ppl


def block_influence(model: nn.Module, x: torch.Tensor, kwargs: BlockKwargs, weights: Weights) -> list[float]:
    """ShortGPT's score of each block: 1 - mean over tokens of cos(block input, block output)."""
    scores = []
    for layer in model.model.layers:
        weights.load(layer)
        y = run(layer, x, kwargs)
        weights.release(layer)
        scores.append(1 - F.cosine_similarity(x, y, dim=-1).mean().item())
        x = y
    return scores


def passes(method: str, n: int) -> int:
    """Passes over the blocks choosing n costs: SLEB one per removal (the k-th round runs about
    (L-k)^2/2 blocks), ShortGPT one to rank and one for the perplexities."""
    return n if method == DropMethod.SLEB else 2


class _Passes:
    """Passes over the blocks, each block run counted in on_progress."""

    def __init__(self, model, input_ids, weights, n_passes, on_progress):
        self.model, self.input_ids, self.weights, self.on_progress = model, input_ids, weights, on_progress
        self.n_layers, self.done = len(model.model.layers), 0
        self.x, self.kwargs = first_block_input(model, input_ids, weights)

    def perplexities(self, skip_sets: list[frozenset[int]]) -> list[float]:
        finals = _final_states(self.model, self.x, self.kwargs, skip_sets, self.weights,
                               lambda i: self.on_progress(self.done + i))
        self.done += self.n_layers
        return _perplexities(self.model, self.input_ids, finals, self.weights)

    def influence(self) -> list[float]:
        scores = block_influence(self.model, self.x, self.kwargs, self.weights)
        self.done += self.n_layers
        self.on_progress(self.done)
        return scores


def check(n_layers: int, blocks: list[int]) -> None:
    """One line for a list of blocks to drop that cannot be."""
    if len(blocks) >= n_layers:
        raise PruneError(f"cannot drop {len(blocks)} of the model's {n_layers} blocks: at most {n_layers - 1}")
    if bad := [b for b in blocks if not 0 <= b < n_layers]:
        raise PruneError(f"block {bad[0]} does not exist: the model has blocks 0 to {n_layers - 1}")
    if len(set(blocks)) < len(blocks):
        raise PruneError(f"block {next(b for b in blocks if blocks.count(b) > 1)} is named twice")


@torch.no_grad()
def choose(model: nn.Module, input_ids: torch.Tensor, n: int, method: str, weights: Weights = RESIDENT,
           on_progress: OnProgress = no_progress) -> Dropped:
    """The n blocks to drop from model by method, chosen on input_ids (samples, tokens); the model
    is not changed."""
    check(len(model.model.layers), list(range(n)))
    if method not in DropMethod.values():
        raise PruneError(f"unknown method {method!r}: one of {', '.join(DropMethod.values())}")
    runs = _Passes(model, input_ids, weights, passes(method, n), on_progress)
    if method == DropMethod.SHORTGPT:
        scores = runs.influence()
        return _ranked(runs, method, sorted(range(runs.n_layers), key=scores.__getitem__)[:n])
    removed, after, before = [], [], None
    for r in range(n):
        candidates = [j for j in range(runs.n_layers) if j not in removed]
        ppl = runs.perplexities([frozenset(removed) | {j} for j in candidates]
                                + ([frozenset()] if r == 0 else []))
        if r == 0:
            before = ppl.pop()
        best = min(range(len(candidates)), key=ppl.__getitem__)
        removed.append(candidates[best])
        after.append(ppl[best])
    return Dropped(method, tuple(removed), tuple(after), before)


@torch.no_grad()
def given(model: nn.Module, input_ids: torch.Tensor, blocks: list[int], weights: Weights = RESIDENT,
          on_progress: OnProgress = no_progress) -> Dropped:
    """Dropping these blocks, in this order, with the calibration perplexity after each."""
    check(len(model.model.layers), blocks)
    return _ranked(_Passes(model, input_ids, weights, 1, on_progress), "given", blocks)


def _ranked(runs: _Passes, method: str, order: list[int]) -> Dropped:
    before, *after = runs.perplexities([frozenset(order[:k]) for k in range(len(order) + 1)])
    return Dropped(method, tuple(order), tuple(after), before)
