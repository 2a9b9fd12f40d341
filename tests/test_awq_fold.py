"""Folding AWQ scales leaves the FP model's logits unchanged, on tiny random models of every architecture."""

import pytest
import torch
from transformers import AutoModelForCausalLM

from awq2gguf.assets.synthetic_hf import random_config
from awq2gguf.awq.fold import fold_scales
from awq2gguf.awq.layout import ARCHITECTURES, UnsupportedArchitecture, check_architecture, layout_of


def tiny(arch: str, n_kv_heads: int, **config_items):
    torch.manual_seed(0)
    config = random_config(arch, vocab_size=512, hidden_size=128, intermediate_size=320, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=n_kv_heads, head_dim=32,
                           max_position_embeddings=256, **config_items)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    with torch.no_grad():  # non-trivial norms and biases, so that a wrong fold shows
        for name, p in model.named_parameters():
            if "norm" in name or "bias" in name:
                p.add_(torch.randn_like(p) * 0.3)
    return model


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
@pytest.mark.parametrize("n_kv_heads", [4, 2])
def test_folded_scales_leave_logits_unchanged(arch, n_kv_heads):
    model = tiny(arch, n_kv_heads)
    assert check_architecture(model.config) == type(model).__name__
    tokens = torch.randint(0, 512, (2, 24), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        before = model(tokens).logits
        names = []
        for layer in model.model.layers:
            for group in layout_of(model).scale_groups(layer):
                names.append(group.name)
                fold_scales(group, torch.rand(group.consumers[0].in_features) * 4 + 0.25)
        after = model(tokens).logits
    # v -> o is a group only when v's channels map one to one onto o's inputs (no GQA).
    assert ("attn_v_o" in names) == (n_kv_heads == 4)
    assert torch.allclose(after, before, rtol=1e-4, atol=1e-4), (after - before).abs().max()


def test_a_wrong_fold_changes_the_logits():
    """The check above can fail: scaling consumers alone changes the function."""
    model = tiny("LlamaForCausalLM", 4)
    tokens = torch.randint(0, 512, (1, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        before = model(tokens).logits
        group = layout_of(model).scale_groups(model.model.layers[0])[0]
        for linear in group.consumers:
            linear.weight.mul_(2.0)
        assert not torch.allclose(model(tokens).logits, before, rtol=1e-4, atol=1e-4)


def test_unsupported_architecture_is_named_with_the_supported_list():
    from transformers import GPT2Config

    with pytest.raises(UnsupportedArchitecture, match=r"architecture GPT2LMHeadModel is not supported; "
                                                      r"supported: LlamaForCausalLM, MistralForCausalLM"):
        check_architecture(GPT2Config(architectures=["GPT2LMHeadModel"]))
