"""Running a model one part at a time: the first block's input, one block (FP or Q4_0), the whole model.

A model's parts get their weights through a `Weights` store just before they run and give them
back after, so a model bigger than memory can be held one decoder block at a time
(streamed.StreamedModel). A model that is all in memory uses `RESIDENT`, which does nothing.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from typing import Callable, Iterator, Protocol

import torch
from torch import nn

from ..grids import fake_quant
from .guard import log_probs


class Weights(Protocol):
    def load(self, *modules: nn.Module) -> None:
        """Give the modules their latest weights (the last saved, else the checkpoint's)."""

    def save(self, *modules: nn.Module) -> None:
        """Keep the modules' weights as they are now (folded), and let them go."""

    def release(self, *modules: nn.Module) -> None:
        """Let the modules' weights go, unchanged."""


class Resident:
    """Every weight stays in memory: nothing to load or save."""

    def load(self, *modules):
        pass

    save = release = load


RESIDENT = Resident()


class BlockKwargs:
    """The keyword arguments (attention mask, RoPE tables) each decoder layer of a model is called
    with, by layer: Gemma 3's sliding-window layers get other ones than its global layers."""

    def __init__(self, by_layer: dict[nn.Module, dict]):
        self.by_layer = by_layer

    def of(self, layer: nn.Module) -> dict:
        return self.by_layer[layer]

    def for_batch(self, n_batch: int, n: int) -> "BlockKwargs":
        """The arguments for the first n of n_batch sequences (tensors that are shared by the
        batch, such as rotary tables with a batch of 1, stay as they are; a tensor shared by
        layers stays shared)."""
        cut_once: dict[int, object] = {}

        def cut(v):
            if isinstance(v, torch.Tensor) and v.dim() > 0 and v.shape[0] == n_batch and n_batch > 1:
                return cut_once.setdefault(id(v), v[:n])
            if isinstance(v, tuple):
                return tuple(cut(t) for t in v)
            return v
        return BlockKwargs({layer: {k: cut(v) for k, v in kwargs.items()} for layer, kwargs in self.by_layer.items()})


class _Captured(Exception):
    pass


class _Recorder(nn.Module):
    """Stands in for a decoder layer: notes what the model calls it with, and stops the model
    after the last one (nothing runs but the embeddings and what the model computes for all layers)."""

    def __init__(self, calls: list, last: bool):
        super().__init__()
        self.calls, self.last = calls, last

    def forward(self, *args, **kwargs):
        x = args[0] if args else kwargs.pop("hidden_states")
        self.calls.append((x, kwargs))
        if self.last:
            raise _Captured
        return x


def first_block_input(model: nn.Module, input_ids: torch.Tensor, weights: Weights = RESIDENT
                      ) -> tuple[torch.Tensor, BlockKwargs]:
    """(hidden states, keyword arguments) the first decoder layer receives for input_ids (and the
    keyword arguments of every other layer), the embeddings' weights loaded from `weights` for the
    time it takes."""
    embed = model.get_input_embeddings()
    weights.load(embed)
    try:
        return _first_block_input(model, input_ids)
    finally:
        weights.release(embed)


def _first_block_input(model: nn.Module, input_ids: torch.Tensor) -> tuple[torch.Tensor, BlockKwargs]:
    """first_block_input, the embeddings' weights loaded already."""
    layers, calls = model.model.layers, []
    model.model.layers = nn.ModuleList(_Recorder(calls, i == len(layers) - 1) for i in range(len(layers)))
    try:
        model(input_ids, use_cache=False)
    except _Captured:
        pass
    finally:
        model.model.layers = layers
    return calls[0][0], BlockKwargs({layer: kwargs for layer, (_, kwargs) in zip(layers, calls, strict=True)})


def run(layer: nn.Module, x: torch.Tensor, kwargs: BlockKwargs) -> torch.Tensor:
    out = layer(x, **kwargs.of(layer))
    return out[0] if isinstance(out, tuple) else out


def quantized_embedded(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The first block's input x as the GGUF has it: rows of the Q4_0 (or Q8_0) token embeddings,
    times the scale the embeddings multiply by (Gemma's sqrt(hidden size), else 1). Rows are
    quantized on their own: quantizing the rows looked up is quantizing the table."""
    embed = model.get_input_embeddings()
    scale = getattr(embed, "scalar_embed_scale", 1.0)
    return fake_quant(embed, x / scale) * scale


@contextmanager
def fake_quantized(layer: nn.Module) -> Iterator[None]:
    """Inside the with-statement, the layer's linears have their round trip through their grid as weights."""
    linears = [m for m in layer.modules() if isinstance(m, nn.Linear)]
    saved = [l.weight.data for l in linears]  # not copied: the weights are swapped, not written
    with torch.no_grad():
        for l in linears:
            l.weight.data = fake_quant(l, l.weight.data)
    try:
        yield
    finally:
        for l, w in zip(linears, saved):
            l.weight.data = w


# modes.Precision's resolved choices as the dtype the products run in.
PRODUCTS = {"fp32": torch.float32, "bf16": torch.bfloat16}


def products_in(products: torch.dtype):
    """A context in which the linears multiply in `products`: bf16 autocast, or FP32 as they are."""
    return nullcontext() if products == torch.float32 else torch.autocast("cpu", dtype=products)


@torch.no_grad()
def run_fake_quantized(layer: nn.Module, x: torch.Tensor, kwargs: BlockKwargs,
                       products: torch.dtype = torch.float32) -> torch.Tensor:
    with fake_quantized(layer), products_in(products):
        return run(layer, x, kwargs).float()


def output_modules(model: nn.Module) -> tuple[nn.Module, ...]:
    """What turns the last block's output into logits (a tied head is the embeddings' module)."""
    return model.model.norm, model.get_output_embeddings()


def _cat(parts: list):
    return tuple(torch.cat(p) for p in zip(*parts)) if isinstance(parts[0], tuple) else torch.cat(parts)


@torch.no_grad()
def model_log_probs(model: nn.Module, input_ids: torch.Tensor, quantized: tuple[bool, ...],
                    weights: Weights = RESIDENT, keep: Callable = lambda lp, _ids: lp) -> list:
    """Log-probabilities (tokens, vocab) of every position of input_ids, one tensor per entry of
    `quantized`: the FP model (False) or the quantized one (True: every linear, the token
    embeddings and the output matrix Q4_0, or the output Q8_0, as the GGUF will be). Sequences run
    one at a time; each part's weights are loaded once for all the variants. keep(log-probs, ids) reduces each
    sequence's (a tensor or a tuple of them, concatenated over the sequences in place of the
    log-probabilities)."""
    embed = model.get_input_embeddings()
    weights.load(embed)
    inputs = [_first_block_input(model, row[None]) for row in input_ids]  # one sequence at a time
    weights.release(embed)
    states = [[quantized_embedded(model, x) if q else x for x, _ in inputs] for q in quantized]
    for layer in model.model.layers:
        weights.load(layer)
        for q, xs in zip(quantized, states):
            with fake_quantized(layer) if q else nullcontext():  # once for all the sequences
                xs[:] = [run(layer, x, kwargs) for x, (_, kwargs) in zip(xs, inputs)]
        weights.release(layer)
    norm, head = output_modules(model)
    weights.load(norm, head)
    out = [_cat([keep(log_probs(x, norm, head, quantize_head=q), ids) for x, ids in zip(xs, input_ids)])
           for q, xs in zip(quantized, states)]
    weights.release(norm, head)
    return out
