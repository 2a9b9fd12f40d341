"""Off-grid twins (assets/off_grid.py): the same function as the model they permute, and no longer
on the grid their matrices were quantized to."""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from awq2gguf.assets.off_grid import OffGridError, off_grid_folder, permute_state
from awq2gguf.assets.synthetic_hf import random_config
from awq2gguf.q4_0 import q4_0_fake_quant

ARCHS = ["LlamaForCausalLM", "Qwen2ForCausalLM", "Gemma3ForCausalLM"]


def on_q4_0_grid(arch: str, tied: bool):
    """A tiny random model of arch whose matrices all lie on the Q4_0 grid, as a dequantized model's
    lie on their source's grid; head size 64, so each head's value channels span two Q4_0 blocks."""
    torch.manual_seed(0)
    config = random_config(arch, vocab_size=256, hidden_size=128, intermediate_size=192, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, head_dim=64, max_position_embeddings=128,
                           tie_word_embeddings=tied)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.copy_(q4_0_fake_quant(p))
            else:  # norms and biases that are not all alike, so a wrong permutation shows
                p.add_(torch.randn_like(p) * 0.3)
    return model


def round_trip_errors(state: dict[str, torch.Tensor]) -> dict[str, float]:
    return {n: (q4_0_fake_quant(t) - t).abs().max().item() for n, t in state.items() if t.dim() == 2}


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("arch", ARCHS)
def test_the_twin_computes_the_same_logits_off_the_grid(arch, tied):
    model = on_q4_0_grid(arch, tied)
    state = model.state_dict()
    twin_state = permute_state(state, model.config.to_dict(), seed=3)
    twin = AutoModelForCausalLM.from_config(model.config, dtype=torch.float32).eval()
    twin.load_state_dict(twin_state)
    tokens = torch.randint(0, 256, (2, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        before, after = model(tokens).logits, twin(tokens).logits
    assert torch.allclose(after, before, rtol=1e-4, atol=1e-4), (after - before).abs().max()
    # Every matrix came back exactly from Q4_0; its twin does not, not one of them.
    assert not any(round_trip_errors(state).values())
    assert all(round_trip_errors(twin_state).values()), round_trip_errors(twin_state)


def test_a_wrong_permutation_changes_the_logits():
    """The check above can fail: permuting the residual stream without its norms changes the function."""
    model = on_q4_0_grid("LlamaForCausalLM", True)
    state = model.state_dict()
    twin_state = permute_state(state, model.config.to_dict())
    twin_state["model.norm.weight"] = state["model.norm.weight"]
    twin = AutoModelForCausalLM.from_config(model.config, dtype=torch.float32).eval()
    twin.load_state_dict(twin_state)
    tokens = torch.randint(0, 256, (1, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert not torch.allclose(twin(tokens).logits, model(tokens).logits, rtol=1e-3, atol=1e-3)


def test_a_folder_twin_keeps_the_other_files(tmp_path):
    model = on_q4_0_grid("Qwen2ForCausalLM", False)
    model.save_pretrained(tmp_path / "src")
    (tmp_path / "src" / "tokenizer.json").write_text("{}")
    twin = off_grid_folder(tmp_path / "src", tmp_path / "twin")
    assert sorted(f.name for f in twin.iterdir()) == sorted(f.name for f in (tmp_path / "src").iterdir())
    assert json.loads((twin / "config.json").read_text()) == json.loads((tmp_path / "src" / "config.json").read_text())


def test_a_folder_with_pickled_weights_is_refused_and_no_twin_is_left(tmp_path):
    model = on_q4_0_grid("Qwen2ForCausalLM", False)
    model.save_pretrained(tmp_path / "src")
    torch.save(model.state_dict(), tmp_path / "src" / "pytorch_model.bin")  # as older checkpoints ship
    with pytest.raises(OffGridError, match=r"pytorch_model\.bin would be copied unpermuted"):
        off_grid_folder(tmp_path / "src", tmp_path / "twin")
    assert not (tmp_path / "twin").exists()


def test_fused_matrices_are_refused_by_name():
    config = {"hidden_size": 64, "num_attention_heads": 2, "num_key_value_heads": 2, "num_hidden_layers": 1,
              "intermediate_size": 128}
    with pytest.raises(OffGridError, match=r"model\.layers\.0\.self_attn\.qkv_proj\.weight"):
        permute_state({"model.layers.0.self_attn.qkv_proj.weight": torch.zeros(192, 64)}, config)
