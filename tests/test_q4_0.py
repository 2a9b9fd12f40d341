"""The torch Q4_0 fake-quantizer is bit-identical to ggml's (gguf.quants mirrors ggml exactly); with
learned scales its result is its own ggml round trip, and the scales' gradient is LSQ's."""

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType
from gguf.quants import dequantize, quantize

from awq2gguf.q4_0 import BLOCK, q4_0_dequantize, q4_0_fake_quant, q4_0_quantize, q4_0_scale_grad


def reference(w: np.ndarray) -> np.ndarray:
    return dequantize(quantize(w, GGMLQuantizationType.Q4_0), GGMLQuantizationType.Q4_0)


def weights_with_tails(seed: int, rows: int, cols: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((rows, cols), dtype=np.float32) * rng.uniform(1e-4, 3, (rows, 1)).astype(np.float32)
    w[rng.random(w.shape) < 0.01] *= 40  # outliers, as in real activations-aware weights
    w[0, :32] = 0                        # an all-zero block: d = 0
    w[1, :32] = 1.5                      # ties in magnitude: the first one sets the sign of d
    w[1, 5] = -1.5
    w[3, :32] = -1.5                     # ... the first of opposite signs, this time negative
    w[3, 9] = 1.5
    w[2, -32:] = rng.standard_normal(32).astype(np.float32) * 1e-30  # tiny values, FP16 d underflows
    return w


@pytest.mark.parametrize("seed,rows,cols", [(0, 64, 896), (1, 37, 4864), (2, 8, 32)])
def test_fake_quant_is_bit_identical_to_ggml(seed, rows, cols):
    w = weights_with_tails(seed, rows, cols)
    ours = q4_0_fake_quant(torch.from_numpy(w)).numpy()
    assert np.array_equal(ours.view(np.uint32), reference(w).view(np.uint32))


def test_keeps_dtype_and_shape_and_rejects_ragged_rows():
    w = torch.randn(3, 2, 64, dtype=torch.float16)
    out = q4_0_fake_quant(w)
    assert out.dtype == torch.float16 and out.shape == w.shape
    with pytest.raises(ValueError, match="multiple of 32"):
        q4_0_fake_quant(torch.randn(4, 48))


@pytest.mark.parametrize("seed,rows,cols", [(0, 64, 896), (1, 37, 4864)])
def test_quantize_stores_what_ggml_stores(seed, rows, cols):
    w = weights_with_tails(seed, rows, cols)
    q, d = q4_0_quantize(torch.from_numpy(w))
    blocks = quantize(w, GGMLQuantizationType.Q4_0).reshape(-1, 18)
    q = q.reshape(-1, 32).numpy()
    assert np.array_equal(blocks[:, :2].copy().view(np.float16).ravel(), d.numpy().ravel())
    assert np.array_equal(blocks[:, 2:], q[:, :16] | (q[:, 16:] << 4))
    assert np.array_equal(q4_0_dequantize(torch.from_numpy(q).reshape(w.shape), d).numpy(), reference(w))


def _scales(seed: int, n_blocks: int) -> torch.Tensor:
    """Scales in [0.5, 1], with the ends and 1 just below (the peak value rounds to -8 there, not past it)."""
    rng = np.random.default_rng(seed)
    s = rng.uniform(0.5, 1, (n_blocks, 1)).astype(np.float32)
    s[:3] = [[1.0], [0.5], [0.97]]
    return torch.from_numpy(s)


@pytest.mark.parametrize("seed,rows,cols", [(0, 64, 896), (1, 37, 4864)])
def test_a_learned_grid_is_its_own_ggml_round_trip(seed, rows, cols):
    """What q4_0_fake_quant gives with scales is what ggml's Q4_0 of it gives back (value for value:
    an all-zero block's -0 comes back +0): a GGUF of the tuned weights holds the learned grid. At scale
    1 it is ggml's own, bit for bit."""
    w = weights_with_tails(seed, rows, cols)
    scale = _scales(seed, w.size // BLOCK)
    ours = q4_0_fake_quant(torch.from_numpy(w), scale).numpy()
    assert np.array_equal(reference(ours), ours)
    plain = reference(w)
    assert not np.array_equal(ours, plain)
    ones = q4_0_fake_quant(torch.from_numpy(w), torch.ones(w.size // BLOCK, 1)).numpy()
    assert np.array_equal(ones.view(np.uint32), plain.view(np.uint32))


def test_the_scales_gradient_is_lsqs_straight_through_rounding():
    """q4_0_scale_grad against autograd over an LSQ fake quantizer written out (d = ggml's d times the
    scale, the rounding straight through inside the grid, a clamped value moving with d only)."""
    w = torch.from_numpy(weights_with_tails(3, 16, 256))
    scale = _scales(3, w.numel() // BLOCK)
    grad = torch.randn(w.shape, generator=torch.Generator().manual_seed(0))
    blocks = w.reshape(-1, BLOCK)
    peak = blocks.gather(1, blocks.abs().argmax(1, keepdim=True))
    s = scale.clone().requires_grad_(True)
    d = peak * s / -8
    t = blocks / torch.where(d == 0, torch.ones_like(d), d) * (d != 0)
    level = (t + 8.5).trunc().clamp(0, 15).detach() - 8
    inside = (t >= -8.5) & (t < 7.5)
    level = torch.where(inside, t + (level - t).detach(), level)
    ((level * d).reshape(w.shape) * grad).sum().backward()
    assert torch.allclose(q4_0_scale_grad(w, scale, grad), s.grad, rtol=1e-4, atol=1e-6)
