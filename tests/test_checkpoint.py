"""Loading a checkpoint: FP32 weights equal to the file's after the cast hands its pages back."""

import mmap

import torch
from safetensors.torch import load_file

from awq2gguf.checkpoint import load_model


def test_fp32_weights_equal_the_bf16_checkpoint(tiny_hf):
    folder = tiny_hf("Qwen2ForCausalLM", "tiny-tied")
    stored = {}
    for shard in folder.glob("*.safetensors"):
        stored.update(load_file(shard))
    # At least one tensor spans whole pages, so the page-dropping path runs.
    assert any(t.numel() * t.element_size() >= 2 * mmap.PAGESIZE for t in stored.values())
    assert {t.dtype for t in stored.values()} == {torch.bfloat16}
    model = load_model(folder)
    weights = model.state_dict()
    for name, t in stored.items():
        assert weights[name].dtype == torch.float32 and torch.equal(weights[name], t.float()), name
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight


def test_f16_rounding_breaks_the_ties_of_weights_on_a_coarser_grid():
    """Weights dequantized from 5 bits sit on Q4_0's exact halves, which ggml always rounds up: a
    bias in every block, in FP32. After F16 rounding they go both ways, as in llama.cpp's F16 path."""
    from torch import nn

    from awq2gguf.checkpoint import round_to_f16
    from awq2gguf.q4_0 import q4_0_fake_quant

    g = torch.Generator().manual_seed(0)
    d = torch.rand(4096, 1, generator=g) * 0.01 + 0.001
    q = torch.randint(-15, 16, (4096, 32), generator=g).float()
    q[:, 0] = -16  # the block's largest magnitude: Q4_0's step is then exactly twice the grid's
    linear = nn.Linear(32, 4096, bias=False).requires_grad_(False)
    linear.weight.data = q * d
    bias_f32 = (q4_0_fake_quant(linear.weight) - linear.weight).mean().abs() / d.mean()
    round_to_f16(linear)
    assert torch.equal(linear.weight, linear.weight.half().float())
    bias_f16 = (q4_0_fake_quant(linear.weight) - linear.weight).mean().abs() / d.mean()
    assert bias_f16 < 0.3 * bias_f32, (bias_f16, bias_f32)  # measured: 0.40 -> 0.08 of a grid step
