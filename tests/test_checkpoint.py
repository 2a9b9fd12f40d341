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
