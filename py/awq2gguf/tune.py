"""Quantization-aware tuning with distillation, on ggml's exact grids (`--tune-steps`).

After AWQ, the folded model's matrices lie on their grids (grids.grid_of: Q4_0, or the type the
plan gives them). Tuning goes on from there, the whole model in memory: every decoder-block matrix,
and a tied output matrix on Q4_0 (the embedding table, in both its uses), is passed through its
grid's round trip on the way forward (weighted by its imatrix entry, as llama-quantize will
quantize it; the gradient goes straight through to its FP32 latent copy), an untied output matrix
and embedding table are frozen on their grids, and the loss is the KL divergence from the FP
model's next-token distribution (the teacher), per token. What is saved is the latent weights:
their quantization, which the converter or llama-quantize writes, is exactly the model that was trained.

The teacher's distributions are computed once, before AWQ (before dropping blocks, so that a
pruned model is distilled from the unpruned one), and kept as their TOP_K largest log-probabilities
plus the log of the rest's mass: the KL over those TOP_K + 1 outcomes is exact for them and a lower
bound of the full one, and costs TOP_K numbers per token instead of the vocabulary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Iterator

import torch
from torch import nn
from torch.nn import functional as F

from .awq.apply import output_is_tied
from .awq.forward import RESIDENT, Weights, model_log_probs
from .errors import Awq2ggufError
from .modes import TuneLoss, TuneMode, TuneParams
from .progress import OnProgress, no_progress
from .q4_0 import BLOCK, q4_0_fake_quant, q4_0_scale_grad
from .grids import Q4_0, fake_quant, grid_of

# The teacher's log-probabilities kept per token: 256 gave both development models a lower KLD to FP
# than 64 (bench/results/README.md, Quantization-aware tuning with distillation).
TOP_K = 256
LR = 0.008  # peak learning rate in Q4_0 grid steps (grid_step)
TSLD_TEMPERATURE = 10.0  # as TSLD's own code (aiha-lab/TSLD, kd_tsld_temp)
SEQUENCES_PER_STEP = 4
WARMUP = 0.1  # share of the steps over which the learning rate rises
# Learned Q4_0 scales (ThroughGrid's scales): their peak learning rate (a factor of ggml's d per step;
# faster ones lost, bench/results/README.md, Learned Q4_0 scales) and their floor (AutoRound's and
# OmniQuant's clipping ranges start at half).
SCALE_LR = 0.001
SCALE_MIN = 0.5
# Whole-model tuning's peak: per weight its FP32 value, latent, gradient and Adam's two moments (20
# bytes) and the activations, plus the logits and the teacher; fitted to the development models'
# measured peaks (bench/results/README.md, Quantization-aware tuning with distillation).
WHOLE_MODEL_BYTES_PER_WEIGHT = 24
WHOLE_MODEL_BYTES_FIXED = 3 * 2**29
MEMORY_SHARE = 0.8  # of the available memory that whole-model tuning may plan on
# Tuning the norms alone end to end holds every weight in FP32 and the activations the norms'
# gradients pass through; nothing per weight is trained.
NORMS_BYTES_PER_WEIGHT = 6


class TuneError(Awq2ggufError):
    pass


def choose_mode(mode: TuneMode, params: TuneParams, n_params: int, available: int) -> tuple[TuneMode, str]:
    """The tuning mode for a model of n_params weights on a machine with `available` bytes of free
    memory, and why: `mode` if it is not "auto"; the whole model for params "norms" (block-wise
    tuning trains matrices); else the whole model if its tuning's estimated peak fits in
    MEMORY_SHARE of the free memory (it closes more of the gap), else block by block."""
    need = WHOLE_MODEL_BYTES_PER_WEIGHT * n_params + WHOLE_MODEL_BYTES_FIXED
    estimate = f"whole-model tuning needs about {need / 2**30:.1f} GiB, {available / 2**30:.1f} GiB are free"
    if mode != TuneMode.AUTO:
        return mode, f"--tune-mode {mode} ({estimate})"
    if params == TuneParams.NORMS:
        return TuneMode.MODEL, "--tune-params norms trains the whole model's norms and biases"
    if need <= MEMORY_SHARE * available:
        return TuneMode.MODEL, estimate
    return TuneMode.BLOCKS, f"{estimate}: one block at a time"


def check_norms_fit(n_params: int, available: int, tied_output: int = 0) -> None:
    """Fail before the slow work if end-to-end tuning of the norms (and of the tied_output weights
    of a tied output matrix) would not fit in MEMORY_SHARE of the free memory."""
    need = NORMS_BYTES_PER_WEIGHT * n_params + WHOLE_MODEL_BYTES_PER_WEIGHT * tied_output + WHOLE_MODEL_BYTES_FIXED
    if need > MEMORY_SHARE * available:
        raise TuneError(f"--tune-norms-steps holds the whole model: about {need / 2**30:.1f} GiB, "
                        f"{available / 2**30:.1f} GiB are free (block-wise tuning alone needs one block)")


@dataclass(frozen=True)
class Teacher:
    """The FP model's next-token distributions on the tuning sequences (sequences, tokens, ...)."""
    top_log_probs: torch.Tensor  # (n, T, TOP_K)
    top_ids: torch.Tensor  # (n, T, TOP_K)
    rest_log_prob: torch.Tensor  # (n, T): log of the mass outside the top TOP_K
    target_log_prob: torch.Tensor  # (n, T - 1): of the token that comes next (TSLD's token scale)


def teacher(model: nn.Module, input_ids: torch.Tensor, weights: Weights = RESIDENT) -> Teacher:
    def keep(lp: torch.Tensor, ids: torch.Tensor):
        lp = lp.float()
        top = lp.topk(TOP_K, dim=-1)
        rest = lp.scatter(-1, top.indices, -math.inf).logsumexp(-1)
        target = lp[:-1].gather(-1, ids[1:, None])[:, 0]
        return top.values, top.indices, rest, target

    (kept,) = model_log_probs(model, input_ids, (False,), weights, keep=keep)
    n, t = input_ids.shape
    top, ids, rest, target = kept
    return Teacher(top.reshape(n, t, TOP_K), ids.reshape(n, t, TOP_K), rest.reshape(n, t), target.reshape(n, t - 1))


def distill_loss(logits: torch.Tensor, teacher: Teacher, rows: torch.Tensor, loss: TuneLoss = TuneLoss.KL) -> torch.Tensor:
    """Mean over the sequences `rows` of the teacher's KL divergence to logits (len(rows), T, vocab)
    over TOP_K + 1 outcomes, per token: averaged (kl), or weighted by the softmax over the sequence of
    the teacher's cross-entropy on the next token over TSLD_TEMPERATURE (tsld: tokens the teacher
    finds hard weigh more). The last position has no next token and is left out of both."""
    lp = F.log_softmax(logits[:, :-1].float(), -1)
    top_lp, top_ids = teacher.top_log_probs[rows, :-1], teacher.top_ids[rows, :-1]
    rest_lp = teacher.rest_log_prob[rows, :-1]
    student_top = lp.gather(-1, top_ids)
    student_rest = lp.scatter(-1, top_ids, -math.inf).logsumexp(-1)
    kl = (top_lp.exp() * (top_lp - student_top)).sum(-1) + rest_lp.exp() * (rest_lp - student_rest)
    if loss == TuneLoss.TSLD:
        scale = F.softmax(-teacher.target_log_prob[rows] / TSLD_TEMPERATURE, dim=-1)
    else:
        scale = torch.full_like(kl, 1 / kl.shape[-1])
    return (kl * scale).sum(-1).mean()


def trains_tied_output(model: nn.Module, params: TuneParams, norms_output: bool = False) -> bool:
    """Whether tuning trains the output matrix, which is then the embedding table too (tied): with
    params "all", or with "norms" and norms_output (--tune-norms-output). AWQ can only clip a tied
    output matrix (an untied one gets scales through the final norm), and there training it pays;
    training an untied one changed nothing, for more time and memory (bench/results/README.md,
    Quantization-aware tuning with distillation)."""
    return ((params == TuneParams.ALL or norms_output) and output_is_tied(model)
            and grid_of(model.get_output_embeddings()) is Q4_0)


def _trainable(model: nn.Module, params: TuneParams,
               tied_output: bool) -> tuple[list[nn.Module], list[nn.Parameter]]:
    """What trains: the modules whose weights go through their grids, the decoder blocks' matrices
    (not with "norms") and with tied_output the output matrix (one tensor, the embedding table too);
    and the parameters that train as they are, the norms' and the biases (F32 in the GGUF)."""
    exact = [p for p in model.model.parameters() if p.dim() == 1]
    modules = [m for m in model.model.layers.modules() if isinstance(m, nn.Linear)] \
        if params == TuneParams.ALL else []
    if tied_output:
        modules.append(model.get_input_embeddings())
    return modules, exact


def grid_step(module: nn.Module) -> float:
    """The median Q4_0 scale of the matrices in module (a block's largest magnitude / 8: one step of
    its grid). Adam moves every weight by about the learning rate per step, whatever its size, so
    the learning rate is given in these steps: the development models' steps are far apart, and a
    fixed rate that suits one made the other's tuning diverge (bench/results/README.md,
    Quantization-aware tuning with distillation)."""
    steps = [m.weight.detach().reshape(-1, BLOCK).abs().amax(1) / 8
             for m in module.modules() if isinstance(m, nn.Linear)]
    return torch.cat(steps).median().item()


def _schedule(step: int, steps: int) -> float:
    """The learning rate's factor: a linear warm-up over WARMUP of the steps, then a cosine to 0."""
    warm = max(1, round(WARMUP * steps))
    if step < warm:
        return (step + 1) / warm
    return 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, steps - warm)))


def batches(n: int, steps: int, seed: int) -> Iterator[list[int]]:
    """SEQUENCES_PER_STEP (at most n) of n sequences for each of `steps` steps, in shuffled epochs."""
    generator = torch.Generator().manual_seed(seed)
    order: list[int] = []
    for _ in range(steps):
        rows = []
        while len(rows) < min(SEQUENCES_PER_STEP, n):
            order = order or torch.randperm(n, generator=generator).tolist()
            rows.append(order.pop())
        yield rows


class ThroughGrid:
    """AdamW with the schedule above on FP32 latent copies of the weights of `quantized` (modules,
    each on its grid) and on `exact` as they are. Before each step's forward, quantize() makes the
    weights their latents' round trips through their grids (grids.fake_quant); step() passes their
    gradient straight through to the latents (STE); finish() leaves the latents in the weights, whose
    quantization is then exactly the model that was trained. With scales, each Q4_0 block's d is
    ggml's times a scale of its own, learned too (LSQ's gradient, kept in [SCALE_MIN, 1]); finish()
    then leaves those weights' round trips, which are their own Q4_0 round trips (q4_0_fake_quant),
    so the GGUF holds the learned grid. Matrices on other grids learn no scales."""

    def __init__(self, quantized: list[nn.Module], exact: list[nn.Parameter], lr: float, steps: int,
                 scales: bool = False):
        self.modules, self.exact = quantized, exact
        self.quantized = [m.weight for m in quantized]
        for p in self.quantized + exact:
            p.requires_grad_(True)
        self.latents = [w.detach().clone() for w in self.quantized]
        self.scales = [torch.ones(w.numel() // BLOCK, 1, device=w.device) if scales and grid_of(m) is Q4_0 else None
                       for m, w in zip(quantized, self.quantized)]
        learned = [s for s in self.scales if s is not None]
        # fused: one pass over all the tensors per step rather than a loop of small ops per tensor
        groups = [{"params": self.latents + exact}] + ([{"params": learned, "lr": SCALE_LR}] if learned else [])
        self.optimizer = torch.optim.AdamW(groups, lr=lr, weight_decay=0.0, fused=True)
        self.schedule = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lambda step: _schedule(step, steps))

    def _round_trip(self, i: int) -> torch.Tensor:
        scale, latent = self.scales[i], self.latents[i]
        return fake_quant(self.modules[i], latent) if scale is None else q4_0_fake_quant(latent, scale)

    @torch.no_grad()
    def quantize(self) -> None:
        for i, w in enumerate(self.quantized):
            w.copy_(self._round_trip(i))

    def step(self) -> None:
        for w, latent, scale in zip(self.quantized, self.latents, self.scales):
            if scale is not None:
                scale.grad = q4_0_scale_grad(latent, scale, w.grad)
            latent.grad, w.grad = w.grad, None
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.schedule.step()
        with torch.no_grad():
            for scale in self.scales:
                if scale is not None:
                    scale.clamp_(SCALE_MIN, 1)

    @torch.no_grad()
    def finish(self) -> None:
        for i, (w, latent) in enumerate(zip(self.quantized, self.latents)):
            w.copy_(latent if self.scales[i] is None else self._round_trip(i))
        for p in self.quantized + self.exact:
            p.requires_grad_(False)
            p.grad = None


def tune(model: nn.Module, input_ids: torch.Tensor, teacher: Teacher, steps: int, lr: float,
         params: TuneParams = TuneParams.ALL, loss: TuneLoss = TuneLoss.KL, seed: int = 0,
         on_progress: OnProgress = no_progress, tied_output: bool | None = None, scales: bool = False) -> list[float]:
    """Train the model (whose weights are all in memory, matrices on their grids or not) in place
    for `steps` optimizer steps of SEQUENCES_PER_STEP sequences of input_ids, drawn in shuffled
    epochs; returns each step's loss. tied_output: whether a tied output matrix trains (None:
    trains_tied_output(model, params)); scales: each Q4_0 block's scale is learned too (ThroughGrid).
    Afterwards the matrices hold what ThroughGrid.finish leaves; an untied embedding table and output
    matrix hold their quantized values."""
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    embed, head = model.get_input_embeddings(), model.get_output_embeddings()
    with torch.no_grad():
        for m in {embed, head}:
            m.weight.data = fake_quant(m, m.weight.data)
    for p in model.parameters():
        p.requires_grad_(False)
    model.to(device)
    teacher = _on(teacher, device)
    if tied_output is None:
        tied_output = trains_tied_output(model, params)
    trainer = ThroughGrid(*_trainable(model, params, tied_output), lr, steps, scales)
    losses = []
    try:
        for step, rows in enumerate(batches(len(input_ids), steps, seed)):
            trainer.quantize()
            total = 0.0
            for row in rows:  # one sequence at a time: a (tokens, vocab) logit block is the largest tensor
                logits = model(input_ids[row:row + 1].to(device), use_cache=False).logits
                part = distill_loss(logits, teacher, torch.tensor([row], device=device), loss) / len(rows)
                part.backward()
                total += part.item()
            trainer.step()
            losses.append(total)
            on_progress(step + 1, f"loss {total:.4f}")
    finally:
        trainer.finish()
        model.to("cpu")
    return losses


def _on(teacher: Teacher, device: torch.device) -> Teacher:
    return Teacher(**{f.name: getattr(teacher, f.name).to(device) for f in fields(teacher)})
