"""The AWQ scale search finds scales that cut the Q4_0 output error where activations have outliers."""

import pytest
import torch
from torch import nn

from awq2gguf.awq import search
from awq2gguf.awq.search import DEFAULT_GRID, InputStats, apply_clip, output_error, scales_for, search_clip, search_scales
from awq2gguf.q4_0 import q4_0_fake_quant


def group_with_outlier_channels(seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(512, 256, generator=g)
    x[:, [3, 77, 200]] *= 30  # a few salient input channels, as in real LLM activations
    linears = [nn.Linear(256, 384, bias=False), nn.Linear(256, 128, bias=False)]
    for linear in linears:
        nn.init.normal_(linear.weight, std=0.05, generator=g)
    return x, linears


def test_error_from_the_gram_matrix_equals_the_error_over_tokens():
    x, linears = group_with_outlier_channels()
    s = scales_for(x.abs().mean(0), 0.5)
    direct = sum((x @ (q4_0_fake_quant(l.weight * s) / s).T - x @ l.weight.T).pow(2).mean().item() for l in linears)
    assert output_error(InputStats.of(x), linears, s) == pytest.approx(direct, rel=1e-3)


def test_a_matrix_too_big_for_the_budget_is_judged_on_evenly_spaced_rows(monkeypatch):
    """The first linear (384 rows) costs 384 x 256 x 256 multiply-adds per evaluation: with a budget
    of a third of that, output_error takes its every 3rd row (every 2nd with a floor of 192 rows);
    the second (128 rows) stays whole; every_row judges both whole."""
    x, linears = group_with_outlier_channels()
    stats, s = InputStats.of(x), scales_for(x.abs().mean(0), 0.5)
    whole = [output_error(stats, [l], s) for l in linears]

    def rows(step):
        sampled = nn.Linear(256, 384 // step, bias=False)
        sampled.weight.data = linears[0].weight[::step].clone()
        return output_error(stats, [sampled], s)

    monkeypatch.setattr(search, "SEARCH_MACS", 384 * 256 * 256 / 3)
    monkeypatch.setattr(search, "SEARCH_MIN_ROWS", 1)
    assert output_error(stats, linears, s) == pytest.approx(rows(3) + whole[1], rel=1e-5)
    assert output_error(stats, linears, s, every_row=True) == pytest.approx(sum(whole), rel=1e-5)
    # Evenly spaced rows of a matrix whose rows are alike estimate its whole error closely.
    assert rows(3) == pytest.approx(whole[0], rel=0.1) and rows(3) != whole[0]
    monkeypatch.setattr(search, "SEARCH_MIN_ROWS", 192)
    assert output_error(stats, linears, s) == pytest.approx(rows(2) + whole[1], rel=1e-5)


def test_alpha_zero_is_plain_q4_0():
    x, linears = group_with_outlier_channels()
    plain = sum((x @ q4_0_fake_quant(l.weight).T - x @ l.weight.T).pow(2).mean().item() for l in linears)
    choice = search_scales(InputStats.of(x), linears, grid=(0.0,))
    assert choice.alpha == 0.0 and choice.error == pytest.approx(plain, rel=1e-3)


def test_search_beats_plain_q4_0_on_outlier_activations():
    x, linears = group_with_outlier_channels()
    choice = search_scales(InputStats.of(x), linears)
    assert choice.alpha > 0
    assert choice.error < 0.7 * choice.plain_error
    # The chosen scales grow with activation magnitude: salient channels are protected.
    assert choice.scales[[3, 77, 200]].min() > choice.scales.median()


def test_coarse_to_fine_search_finds_the_grid_minimum():
    x, linears = group_with_outlier_channels()
    stats = InputStats.of(x)
    errors = {a: output_error(stats, linears, scales_for(stats.mean, a)) for a in DEFAULT_GRID}
    assert search_scales(stats, linears).alpha == min(errors, key=errors.get)


def test_no_gain_means_plain_q4_0_is_kept():
    g = torch.Generator().manual_seed(3)
    x = torch.ones(64, 64)  # every channel alike: any alpha gives s = 1
    linear = nn.Linear(64, 32, bias=False)
    nn.init.normal_(linear.weight, generator=g)
    choice = search_scales(InputStats.of(x), [linear])
    assert choice.alpha == 0.0 and choice.error == choice.plain_error


def test_scaled_stats_are_the_stats_of_the_scaled_input():
    x, _ = group_with_outlier_channels()
    s = torch.rand(256) + 0.5
    expected, scaled = InputStats.of(x / s), InputStats.of(x).scaled(s)
    d = torch.randn(16, 256)
    assert scaled.error(d) == pytest.approx(expected.error(d), rel=1e-4)
    assert torch.allclose(scaled.mean, expected.mean, rtol=1e-5)


@pytest.mark.parametrize("n_tokens", [100, 512])  # fewer tokens than features, and more
def test_input_stats_give_the_error_over_tokens(n_tokens):
    x = torch.randn(n_tokens, 256, generator=torch.Generator().manual_seed(5))
    x[:, 7] = 0  # a dead channel: the Gram matrix is only semi-definite
    stats, d = InputStats.of(x), torch.randn(32, 256)
    assert stats.error(d) == pytest.approx((x @ d.T).pow(2).mean().item(), rel=1e-4)
    xb = x.reshape(n_tokens, 8, 32)
    assert torch.allclose(stats.block_grams(), torch.einsum("nbi,nbj->bij", xb, xb), rtol=1e-3, atol=1e-2)


@pytest.mark.parametrize("features", [3, 258])  # fewer features than bands, and bands of unequal width
def test_gram_is_the_symmetric_product(features):
    a = torch.randn(100, features, generator=torch.Generator().manual_seed(6))
    g = search.gram(a)
    assert torch.equal(g, g.T)
    assert torch.allclose(g, a.T @ a, rtol=1e-5, atol=1e-4)


def block_errors(x, w, w_q):
    """Each Q4_0 block's share of the output error: sum over tokens of (x_b . d_b)^2."""
    d = (w - w_q).reshape(w.shape[0], -1, 32)
    xb = x.reshape(x.shape[0], -1, 32)
    return torch.einsum("tbi,obi->tob", xb, d).pow(2).sum(0)


def test_clip_search_never_loses_and_cuts_the_error():
    g = torch.Generator().manual_seed(4)
    x = torch.randn(256, 128, generator=g)
    linear = nn.Linear(128, 64, bias=False)
    with torch.no_grad():  # Laplace weights, heavier-tailed than Gaussian like trained ones
        linear.weight.copy_(torch.distributions.Laplace(0.0, 0.02).sample((64, 128)))
    w = linear.weight.detach().clone()
    clip = search_clip(InputStats.of(x), linear, rows_per_step=16)  # several row chunks
    apply_clip(linear, clip)
    plain = block_errors(x, w, q4_0_fake_quant(w))
    clipped = block_errors(x, w, q4_0_fake_quant(linear.weight.detach()))
    assert (clipped <= plain * (1 + 1e-4) + 1e-9).all()
    assert clipped.sum() < 0.95 * plain.sum()  # measured: 0.91
    # Clipping only ever shrinks a block's range, and by at most the grid's last step.
    peak = w.reshape(64, -1, 32).abs().amax(-1)
    assert (clip <= peak).all() and (clip >= 0.5 * peak).all() and (clip < peak).any()
