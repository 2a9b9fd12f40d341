"""q8_0.py: ggml's Q8_0 round trip in torch, bit for bit (gguf-py's quantizer is the reference; the
converter's Q8_0 equals llama-quantize's, patch 0024)."""

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType
from gguf.quants import dequantize, quantize

from awq2gguf.q8_0 import q8_0_fake_quant


def reference(w: torch.Tensor) -> torch.Tensor:
    data = w.numpy().astype(np.float32)
    return torch.from_numpy(dequantize(quantize(data, GGMLQuantizationType.Q8_0), GGMLQuantizationType.Q8_0)
                            .reshape(data.shape))


@pytest.mark.parametrize("scale", [1e-3, 1.0, 300.0])
def test_the_round_trip_is_ggml_s(scale):
    w = torch.randn(64, 256, generator=torch.Generator().manual_seed(0)) * scale
    w[0, :32] = 0  # a block of zeros
    w[1, :32] = torch.arange(-16, 16) + 0.5  # d = 1: every value halfway between two steps, rounded away from 0
    w[1, 31] = 127
    w[2, :32] = -w[2, :32].abs()  # largest magnitude negative
    assert torch.equal(q8_0_fake_quant(w), reference(w))


def test_rows_must_hold_whole_blocks():
    with pytest.raises(ValueError, match="multiple of 32"):
        q8_0_fake_quant(torch.zeros(2, 48))
