"""--lora: a PEFT LoRA adapter merged into the checkpoint, part by part, before AWQ; and its errors."""

import dataclasses
import hashlib
import json

import pytest
import torch
from click.testing import CliRunner
from gguf import GGUFReader
from peft import IA3Config, LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM

from awq2gguf import lora
from awq2gguf.assets.synthetic import SHAPES
from awq2gguf.assets.synthetic_hf import write_synthetic_hf
from awq2gguf.cli import main
from awq2gguf.metadata import Key
from conftest import f16_rounded_model

LINEARS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
TOKENS = torch.tensor([[9707, 1879, 13, 576, 3974, 13876, 38835, 34208, 916, 279]])


def make_adapter(model_dir, out, peft_config):
    """A random adapter (B not zero, so it changes the function) saved as peft saves one."""
    torch.manual_seed(1)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    get_peft_model(model, peft_config).save_pretrained(out)
    return out


def logits(model, tokens=TOKENS):
    with torch.no_grad():
        return model(tokens).logits


@pytest.mark.parametrize("arch,shape,config", [
    ("LlamaForCausalLM", "tiny-untied", LoraConfig(r=4, lora_alpha=8, init_lora_weights=False,
                                                   target_modules=LINEARS + ["embed_tokens", "lm_head"])),
    ("Qwen2ForCausalLM", "tiny-tied", LoraConfig(r=8, lora_alpha=4, use_rslora=True, init_lora_weights=False,
                                                 target_modules=LINEARS)),
    ("Qwen3ForCausalLM", "tiny-untied", LoraConfig(r=4, lora_alpha=16, use_dora=True, init_lora_weights=False,
                                                   target_modules=["q_proj", "v_proj", "down_proj"])),
], ids=["lora-embeddings-output", "rslora-tied", "dora"])
def test_merged_checkpoint_gives_the_peft_models_logits(tiny_hf, tmp_path, arch, shape, config):
    model_dir = tiny_hf(arch, shape)
    adapter = make_adapter(model_dir, tmp_path / "adapter", config)
    merged = lora.merge(model_dir, lora.read_adapter(adapter), tmp_path / "merged", dtype=torch.float32)
    got = logits(AutoModelForCausalLM.from_pretrained(merged, dtype=torch.float32).eval())
    want = logits(PeftModel.from_pretrained(f16_rounded_model(model_dir), adapter).eval())
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    # The adapter changes the function (so the comparison above could fail), and the merged
    # folder is a whole checkpoint: config and tokenizer come along.
    assert (got - logits(f16_rounded_model(model_dir))).abs().max() > 1e-2
    assert (merged / "tokenizer.json").is_file() and json.loads((merged / "config.json").read_text())


def test_merged_weights_are_written_in_f16_by_default(tiny_hf, tmp_path):
    from safetensors import safe_open

    model_dir = tiny_hf("LlamaForCausalLM", "tiny-untied")
    adapter = make_adapter(model_dir, tmp_path / "adapter", LoraConfig(r=4, target_modules=LINEARS,
                                                                        init_lora_weights=False))
    merged = lora.merge(model_dir, lora.read_adapter(adapter), tmp_path / "merged")
    dtypes = set()
    for f in merged.glob("*.safetensors"):
        with safe_open(f, framework="pt") as h:
            dtypes |= {h.get_tensor(k).dtype for k in h.keys()}
    assert dtypes == {torch.float16}


def _error(tmp_path, model_dir, adapter) -> str:
    with pytest.raises(lora.LoraError) as e:
        lora.merge(model_dir, lora.read_adapter(adapter), tmp_path / "merged")
    assert "\n" not in str(e.value)
    return str(e.value)


def test_an_adapter_for_another_model_names_the_first_tensor_that_does_not_fit(tiny_hf, tmp_path):
    narrow = dataclasses.replace(SHAPES["tiny-untied"], name="narrow", n_embd=64)
    other = write_synthetic_hf(narrow, tmp_path / "narrow", "LlamaForCausalLM")
    adapter = make_adapter(other, tmp_path / "adapter", LoraConfig(r=4, target_modules=LINEARS))
    message = _error(tmp_path, tiny_hf("LlamaForCausalLM", "tiny-untied"), adapter)
    assert "does not fit" in message and "size mismatch for model.layers.0." in message


def test_an_adapter_naming_modules_the_model_lacks_is_refused(tiny_hf, tmp_path):
    model_dir = tiny_hf("LlamaForCausalLM", "tiny-untied")
    adapter = make_adapter(model_dir, tmp_path / "adapter", LoraConfig(r=4, target_modules=["q_proj"]))
    config = json.loads((adapter / "adapter_config.json").read_text())
    config["target_modules"] = ["c_attn"]  # GPT-2's name
    (adapter / "adapter_config.json").write_text(json.dumps(config))
    assert "does not fit" in _error(tmp_path, model_dir, adapter) and "c_attn" in _error(tmp_path, model_dir, adapter)


def test_adapter_tensors_for_blocks_the_model_lacks_are_refused(tiny_hf, tmp_path):
    from safetensors.torch import load_file, save_file

    model_dir = tiny_hf("LlamaForCausalLM", "tiny-untied")
    adapter = make_adapter(model_dir, tmp_path / "adapter", LoraConfig(r=4, target_modules=["q_proj"]))
    weights = load_file(adapter / "adapter_model.safetensors")
    weights = {k.replace("layers.1.", "layers.7."): v for k, v in weights.items()}
    save_file(weights, adapter / "adapter_model.safetensors")
    assert "model.layers.7.self_attn.q_proj.lora_A.weight has no module there" in _error(tmp_path, model_dir, adapter)


@pytest.mark.parametrize("module", ["lm_head", "embed_tokens"])
def test_a_lora_on_either_side_of_a_tied_matrix_is_refused(tiny_hf, tmp_path, module):
    """Unmerged, it changes one side; merged into the one matrix, it would change both."""
    model_dir = tiny_hf("Qwen2ForCausalLM", "tiny-tied")
    untied = dataclasses.replace(SHAPES["tiny-tied"], name="untied", tied_embeddings=False)
    adapter = make_adapter(write_synthetic_hf(untied, tmp_path / "untied", "Qwen2ForCausalLM"), tmp_path / "adapter",
                           LoraConfig(r=4, target_modules=[module]))
    assert "ties between its token embeddings and its output" in _error(tmp_path, model_dir, adapter)


def test_not_an_adapter_folder_or_not_lora(tiny_hf, tmp_path):
    model_dir = tiny_hf("LlamaForCausalLM", "tiny-untied")
    with pytest.raises(lora.LoraError, match="is not a directory"):
        lora.read_adapter(tmp_path / "missing")
    with pytest.raises(lora.LoraError, match="has no adapter_config.json"):
        lora.read_adapter(model_dir)
    adapter = make_adapter(model_dir, tmp_path / "adapter", LoraConfig(r=4, target_modules=["q_proj"]))
    (adapter / "adapter_model.safetensors").unlink()
    with pytest.raises(lora.LoraError, match=r"has no adapter weights \(adapter_model.safetensors or"):
        lora.read_adapter(adapter)
    ia3 = make_adapter(model_dir, tmp_path / "ia3", IA3Config(target_modules=["q_proj", "down_proj"],
                                                              feedforward_modules=["down_proj"]))
    with pytest.raises(lora.LoraError, match="is a IA3 adapter: --lora merges LoRA adapters only"):
        lora.read_adapter(ia3)


def test_awq2gguf_with_lora_records_the_adapter(tiny_hf, calib_text, tmp_path):
    model_dir = tiny_hf("Qwen2ForCausalLM", "tiny-tied")
    adapter = make_adapter(model_dir, tmp_path / "my-adapter", LoraConfig(r=4, target_modules=LINEARS,
                                                                           init_lora_weights=False))
    out = tmp_path / "out.gguf"
    result = CliRunner().invoke(main, [str(model_dir), str(out), "--lora", str(adapter), "--calib", str(calib_text),
                                       "--calib-samples", "4", "--calib-tokens", "64"])
    assert result.exit_code == 0, result.output
    assert "merging the LoRA adapter my-adapter (rank 4)" in " ".join(result.output.split())
    fields = GGUFReader(out).fields
    sha = hashlib.sha256((adapter / "adapter_model.safetensors").read_bytes()).hexdigest()
    recorded = [fields[k.gguf].contents() for k in (Key.LORA_NAME, Key.LORA_RANK, Key.LORA_SHA256)]
    assert recorded == ["my-adapter", 4, sha]

    (adapter / "adapter_config.json").write_text("{not json")
    bad = tmp_path / "bad.gguf"
    result = CliRunner().invoke(main, [str(model_dir), str(bad), "--lora", str(adapter), "--calib", str(calib_text)])
    assert result.exit_code != 0 and "adapter_config.json does not load" in result.output
    assert not bad.exists() and sorted(p.name for p in tmp_path.iterdir() if ".work-" in p.name) == []
