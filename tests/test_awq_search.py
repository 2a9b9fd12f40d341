"""The AWQ scale search finds scales that cut the Q4_0 output error where activations have outliers."""

import pytest
import torch
from torch import nn

from awq2gguf.awq.search import output_error, scales_for, search_scales
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
    assert output_error(x.T @ x, x.shape[0], linears, s) == pytest.approx(direct, rel=1e-3)


def test_alpha_zero_is_plain_q4_0():
    x, linears = group_with_outlier_channels()
    plain = sum((x @ q4_0_fake_quant(l.weight).T - x @ l.weight.T).pow(2).mean().item() for l in linears)
    choice = search_scales(x, linears, grid=(0.0,))
    assert choice.alpha == 0.0 and choice.error == pytest.approx(plain, rel=1e-3)


def test_search_beats_plain_q4_0_on_outlier_activations():
    x, linears = group_with_outlier_channels()
    choice = search_scales(x, linears)
    assert choice.alpha > 0
    assert choice.error < 0.7 * choice.plain_error
    # The chosen scales grow with activation magnitude: salient channels are protected.
    assert choice.scales[[3, 77, 200]].min() > choice.scales.median()


def test_no_gain_means_plain_q4_0_is_kept():
    g = torch.Generator().manual_seed(3)
    x = torch.ones(64, 64)  # every channel alike: any alpha gives s = 1
    linear = nn.Linear(64, 32, bias=False)
    nn.init.normal_(linear.weight, generator=g)
    choice = search_scales(x, [linear])
    assert choice.alpha == 0.0 and choice.error == choice.plain_error
