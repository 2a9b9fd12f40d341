"""Compensated rounding (GPTQ on the Q4_0 grid): ggml's quantizer keeps it exactly, and it beats plain rounding."""

import pytest
import torch
from gguf import GGMLQuantizationType
from gguf.quants import dequantize, quantize

from awq2gguf.awq import compensate as compensate_module
from awq2gguf.awq.compensate import DAMPING, _compensate_rows, _feedback, compensate
from awq2gguf.awq.search import InputStats
from awq2gguf.q4_0 import q4_0_fake_quant


def correlated_inputs(n_tokens=1024, seed=0):
    """Inputs whose 256 features are mixed (as a layer's are), with a few large channels; seed
    draws other tokens from the same distribution."""
    mixing = torch.randn(256, 256, generator=torch.Generator().manual_seed(42))
    x = torch.randn(n_tokens, 256, generator=torch.Generator().manual_seed(seed)) @ mixing
    x[:, [3, 100]] *= 10
    return x


def weights(rows=96, cols=256, seed=1):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(rows, cols, generator=g) * 0.02
    w[0] = 0  # an all-zero row: scale 0
    w[1, 5] = 0.5  # a positive peak: d < 0
    w[2, 40:44] = -0.3  # tied peaks: ggml takes the first
    return w


def ggml_q4_0(w: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(dequantize(quantize(w.numpy(), GGMLQuantizationType.Q4_0), GGMLQuantizationType.Q4_0))


def textbook_gptq(w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """GPTQ as its paper writes it, one column at a time through the factor of the inverse Hessian,
    with each Q4_0 block's scale taken as ggml does from the block's weights when its first column
    comes up (and its peak on level -8)."""
    h = x.T @ x
    h.diagonal().add_(DAMPING * h.diagonal().mean())
    u = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(h)), upper=True)
    w, q = w.clone(), torch.empty_like(w)
    for j in range(w.shape[1]):
        if j % 32 == 0:
            block = w[:, j:j + 32]
            peak_at = block.abs().argmax(dim=1)
            d = (block.gather(1, peak_at[:, None]).squeeze(1) / -8).half().to(w.dtype)
            inv_d = torch.where(d == 0, 0.0, 1 / d)
        level = torch.trunc(w[:, j] * inv_d + 8.5).clamp(0, 15)
        level[peak_at == j % 32] = 0
        q[:, j] = (level - 8) * d
        w[:, j + 1:] -= ((w[:, j] - q[:, j]) / u[j, j])[:, None] * u[j, j + 1:]
    return q


@pytest.mark.parametrize("n_tokens", [64, 1024])
@pytest.mark.parametrize("batch, span", [(128, 1024), (32, 64)])  # the 256 columns in one span, and in four
def test_the_feedback_form_is_gptq(n_tokens, batch, span, monkeypatch):
    """The lazy-batched feedback form (one Cholesky factor of H) makes GPTQ's choices exactly, in
    float64 where no rounding of the arithmetic decides a level; in float32 a few levels near a
    half go the other way, with the same output error. With bf16 products the first level that
    differs changes every later column's target, so many levels differ, but the output error is
    at most 1% higher."""
    monkeypatch.setattr(compensate_module, "COLUMNS_PER_BATCH", batch)
    monkeypatch.setattr(compensate_module, "COLUMNS_PER_SPAN", span)
    x, w = correlated_inputs(n_tokens).double(), weights().double()
    stats = InputStats(x, x.abs().mean(dim=0), n_tokens, torch.float64)
    reference = textbook_gptq(w, x)
    assert torch.equal(_compensate_rows(w, _feedback(stats), torch.float64), reference)
    single = compensate(w.float(), InputStats.of(x.float())).double()
    assert (single != reference).float().mean() < 1e-2
    assert stats.error(w - single) == pytest.approx(stats.error(w - reference), rel=1e-3)
    bf16 = compensate(w.float(), InputStats.of(x.float(), torch.bfloat16)).double()
    assert stats.error(w - bf16) < 1.01 * stats.error(w - reference)


@pytest.mark.parametrize("n_tokens", [64, 1024])  # fewer tokens than features, and more
@pytest.mark.parametrize("products", [torch.float32, torch.bfloat16])
def test_llama_quantize_writes_the_compensated_weights_bit_for_bit(n_tokens, products):
    out = compensate(weights(), InputStats.of(correlated_inputs(n_tokens), products))
    assert torch.equal(ggml_q4_0(out), out)  # gguf.quants is byte-identical to ggml's quantizer
    assert torch.equal(q4_0_fake_quant(out), out)
    assert torch.equal(out[0], torch.zeros(256))


def test_compensation_cuts_the_output_error_of_plain_rounding():
    x, w = correlated_inputs(), weights()
    stats = InputStats.of(x)
    plain = stats.error(w - q4_0_fake_quant(w))
    compensated = stats.error(w - compensate(w, stats))
    assert compensated < 0.8 * plain, (compensated, plain)
    # ... on tokens it never saw, too (same distribution).
    new = InputStats.of(correlated_inputs(seed=5))
    assert new.error(w - compensate(w, stats)) < new.error(w - q4_0_fake_quant(w))


def test_rows_are_independent_so_matrices_can_be_done_in_pieces():
    stats = InputStats.of(correlated_inputs())
    w = weights()
    whole = compensate(w, stats)
    assert torch.equal(torch.cat([compensate(part, stats) for part in w.split(40)]), whole)
    assert torch.equal(w, weights())  # the input is left as it was ...
    assert torch.equal(compensate(w, stats, out=w), whole) and torch.equal(w, whole)  # ... unless it is out


def test_uncorrelated_inputs_give_nearest_rounding():
    """With a diagonal Hessian no error has anywhere to go: every weight is rounded on its own, to
    its nearest level of the block's FP16 scale (ggml's rounding uses the FP32 scale: a few levels
    differ where the two straddle a half)."""
    x = torch.linalg.qr(torch.randn(4096, 256, generator=torch.Generator().manual_seed(0))).Q * 64
    w = weights()
    out = compensate(w, InputStats.of(x)).view(-1, 32)
    blocks = w.view(-1, 32)
    d = (blocks.gather(1, blocks.abs().argmax(1, keepdim=True)) / -8).half().float()
    inv_d = torch.where(d == 0, torch.zeros_like(d), 1 / d)
    nearest = (torch.trunc(blocks * inv_d + 8.5).clamp(0, 15) - 8) * d
    assert (out != nearest).float().mean() < 1e-3
    assert (out != q4_0_fake_quant(blocks)).float().mean() < 1e-2
