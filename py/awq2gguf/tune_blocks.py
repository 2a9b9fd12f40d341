"""Block-wise quantization-aware tuning (`--tune-steps` in blocks mode), in the memory of one block.

Whole-model tuning (tune.py) holds every weight with its latent copy and optimizer state. Here the
decoder blocks train one at a time as the streamed model walks them (Block-AP of EfficientQAT, Chen
et al. 2024, on ggml's exact grids): a block's matrices pass through their grids' round trips on the
way forward with the gradient straight through to their FP32 latents, its norms and biases train as
they are, and the loss is the mean squared error of the block's output against the FP model's
hidden state after that block. The block's input is the tuned model's own (TuneInput.QUANTIZED: each
block then corrects what the blocks before it left) or the FP model's (TuneInput.FP: each block learns to
reproduce its FP self). Peak memory is one block with its latents, its untuned copy and the optimizer
state, plus three streams of hidden states for the calibration tokens. The training forward and
backward may run under bf16 autocast (modes.Precision), about twice as fast where the CPU has bf16
matrix instructions; the quantization, the optimizer and the held-out checks stay FP32.

A tuned block is kept only where its output error on the held-out calibration samples is lower than
the untuned block's; the pipeline then checks the whole model.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn
from torch.nn import functional as F

from .awq.forward import (PRODUCTS, BlockKwargs, Weights, fake_quantized, first_block_input, products_in,
                          quantized_embedded, run)
from .modes import Precision
from .progress import OnProgress, no_progress
from .tune import ThroughGrid, batches, grid_step

LR = 0.02  # peak learning rate in Q4_0 grid steps of each block (tune.grid_step)
ROWS_PER_RUN = 16  # sequences per no-grad forward: a 7B block's MLP holds rows x tokens x 18944 floats


@dataclass(frozen=True)
class BlockResult:
    first_loss: float  # the training loss of the first step and of the last
    last_loss: float
    held_out_untuned: float | None  # the block's output error on the held-out samples (None: no check)
    held_out_tuned: float | None

    @property
    def kept(self) -> bool:
        return self.held_out_tuned is None or self.held_out_tuned < self.held_out_untuned


@dataclass
class _Stream:
    """Hidden states of some sequences before the current block, FP and (for TuneInput.QUANTIZED) as the
    tuned model has them, with the decoder layer's keyword arguments for them."""
    fp: torch.Tensor
    quantized: torch.Tensor | None
    kwargs: BlockKwargs

    @classmethod
    def start(cls, model: nn.Module, input_ids: torch.Tensor, original: Weights, folded: Weights,
              own_input: bool) -> "_Stream":
        fp, kwargs = first_block_input(model, input_ids, original)
        quantized = quantized_embedded(model, first_block_input(model, input_ids, folded)[0]) if own_input else None
        return cls(fp, quantized, kwargs)

    @property
    def input(self) -> torch.Tensor:
        return self.fp if self.quantized is None else self.quantized


@torch.no_grad()
def _run_rows(layer: nn.Module, x: torch.Tensor, kwargs: BlockKwargs, quantized: bool) -> torch.Tensor:
    with fake_quantized(layer) if quantized else nullcontext():
        return torch.cat([run(layer, part, kwargs.for_batch(len(x), len(part))) for part in x.split(ROWS_PER_RUN)])


def _error(layer: nn.Module, stream: _Stream, target: torch.Tensor) -> float:
    """Mean squared error of the quantized block's output on the stream's input against target."""
    return F.mse_loss(_run_rows(layer, stream.input, stream.kwargs, True), target).item()


def _train(layer: nn.Module, x: torch.Tensor, target: torch.Tensor, kwargs: BlockKwargs, steps: int, lr: float,
           seed: int, bf16: bool, scales: bool, on_step: Callable[[int, float], None]) -> list[float]:
    """Train layer's matrices through their grids (with scales, their Q4_0 blocks' scales too) and its norms and
    biases for `steps` steps so that its output on x approaches target (with bf16, the forward and
    backward under bf16 autocast); afterwards its matrices hold what ThroughGrid.finish leaves."""
    quantized = [m for m in layer.modules() if isinstance(m, nn.Linear)]
    exact = [p for p in layer.parameters() if p.dim() == 1]
    trainer = ThroughGrid(quantized, exact, lr, steps, scales)
    losses = []
    try:
        for step, rows in enumerate(batches(len(x), steps, seed)):
            trainer.quantize()
            with products_in(PRODUCTS[Precision.BF16 if bf16 else Precision.FP32]):
                out = run(layer, x[rows], kwargs.for_batch(len(x), len(rows)))
            loss = F.mse_loss(out.float(), target[rows])
            loss.backward()
            trainer.step()
            losses.append(loss.item())
            on_step(step + 1, losses[-1])
    finally:
        trainer.finish()
    return losses


def tune_blocks(model: nn.Module, input_ids: torch.Tensor, held_out_ids: torch.Tensor, steps: int, lr: float,
                folded: Weights, original: Weights, own_input: bool = True, seed: int = 0, bf16: bool = False,
                scales: bool = False, on_progress: OnProgress = no_progress) -> list[BlockResult]:
    """Tune each decoder block of `model` in turn for `steps` steps of tune.SEQUENCES_PER_STEP
    sequences of input_ids, at a peak learning rate of `lr` Q4_0 grid steps of that block
    (tune.grid_step). Each block's AWQ weights come from `folded`, its FP ones from `original`; a
    block is saved to `folded` only if it beats its untuned self on held_out_ids (always, without
    held-out samples). With own_input the block's input is the tuned model's, else the FP model's;
    with bf16 the training steps run under bf16 autocast; with scales each Q4_0 block's scale is learned
    too (ThroughGrid)."""
    train = _Stream.start(model, input_ids, original, folded, own_input)
    held_out = _Stream.start(model, held_out_ids, original, folded, own_input) if len(held_out_ids) else None
    streams = [s for s in (train, held_out) if s is not None]
    results, n_layers = [], len(model.model.layers)
    for i, layer in enumerate(model.model.layers):
        original.load(layer)
        targets = [_run_rows(layer, s.fp, s.kwargs, False) for s in streams]
        folded.load(layer)
        untuned = [p.detach().clone() for p in layer.parameters()]
        before = _error(layer, held_out, targets[1]) if held_out else None
        losses = _train(layer, train.input, targets[0], train.kwargs, steps, lr * grid_step(layer), seed + i,
                        bf16, scales, lambda step, loss: on_progress(i * steps + step,
                                                       f"block {i + 1}/{n_layers}, loss {loss:.3g}"))
        after = _error(layer, held_out, targets[1]) if held_out else None
        result = BlockResult(losses[0], losses[-1], before, after)
        if not result.kept:
            with torch.no_grad():
                for p, w in zip(layer.parameters(), untuned):
                    p.copy_(w)
        del untuned
        for s, target in zip(streams, targets):
            if s.quantized is not None:
                s.quantized = _run_rows(layer, s.quantized, s.kwargs, True)
            s.fp = target
        (folded.save if result.kept else folded.release)(layer)
        results.append(result)
    return results
