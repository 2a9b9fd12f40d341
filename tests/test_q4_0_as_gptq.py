"""Q4_0 saved as GPTQ tensors: the values come back as Q4_0's, and the vendored converter turns
the folder into the same GGUF as the FP32 weights it came from."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from awq2gguf import q4_0_as_gptq
from awq2gguf.awq.apply import apply_awq
from awq2gguf.convert import ConvertError, convert_hf_to_gguf
from awq2gguf.metadata import overrides, provenance
from awq2gguf.q4_0 import q4_0_fake_quant
from awq2gguf.llama_quantize import quantize
from awq2gguf.streamed import StreamedModel
from test_q4_0 import weights_with_tails


def test_unpack_gives_the_q4_0_values():
    w = torch.from_numpy(weights_with_tails(0, 72, 896))
    stored = q4_0_as_gptq.pack("m.weight", w)
    assert set(stored) == {"m.qweight", "m.qzeros", "m.scales", "m.g_idx"}
    assert stored["m.qweight"].shape == (112, 72) and stored["m.scales"].shape == (28, 72)
    assert torch.equal(q4_0_as_gptq.unpack("m.weight", stored), q4_0_fake_quant(w))


def test_packs_in_row_steps(monkeypatch):
    w = torch.randn(48, 64)
    whole = q4_0_as_gptq.pack("m.weight", w)
    monkeypatch.setattr(q4_0_as_gptq, "ROWS_PER_STEP", 16)
    stepped = q4_0_as_gptq.pack("m.weight", w)
    assert all(torch.equal(whole[n], stepped[n]) for n in whole)
    assert torch.equal(q4_0_as_gptq.unpack("m.weight", stepped), q4_0_fake_quant(w))


def test_only_matrices_in_a_shape_gptq_holds_are_packed():
    assert q4_0_as_gptq.packable("a.weight", torch.zeros(8, 32))
    assert not q4_0_as_gptq.packable("a.weight", torch.zeros(32))  # a norm
    assert not q4_0_as_gptq.packable("a.bias", torch.zeros(8, 32))
    assert not q4_0_as_gptq.packable("a.weight", torch.zeros(12, 32))  # zero points pack 8 rows
    assert not q4_0_as_gptq.packable("a.weight", torch.zeros(8, 48))


def _folder_bytes(folder):
    return sum(f.stat().st_size for f in folder.glob("*.safetensors"))


@pytest.mark.parametrize("arch,shape", [("LlamaForCausalLM", "tiny-untied"), ("Qwen2ForCausalLM", "tiny-tied")])
def test_a_q4_0_folder_converts_to_the_file_llama_quantize_makes(tiny_hf, builds, tmp_path, arch, shape):
    """The same search saved in FP32 (then F32 GGUF, then the patched llama-quantize, the old
    path) and saved as Q4_0 (then the converter's --outtype q4_0): the same file, byte for byte."""
    model_dir = tmp_path / "checkpoint"
    shutil.copytree(tiny_hf(arch, shape), model_dir)
    # Rows of zeros of either sign: ggml writes d = -0 for both, gguf.quants the first zero's sign.
    weights = load_file(model_dir / "model.safetensors")
    weights["model.layers.0.mlp.down_proj.weight"][:2] = torch.tensor([[0.0], [-0.0]])
    save_file(weights, model_dir / "model.safetensors", metadata={"format": "pt"})
    ids = torch.randint(0, 1000, (4, 32), generator=torch.Generator().manual_seed(0))
    folders = {}
    for as_q4_0 in (False, True):
        streamed = StreamedModel(model_dir, tmp_path / str(as_q4_0) / "folded", as_q4_0=as_q4_0)
        apply_awq(streamed.model, ids, weights=streamed, objective_samples=2)
        folders[as_q4_0] = streamed.write_folder()
    assert _folder_bytes(folders[True]) < 0.2 * _folder_bytes(folders[False])
    assert json.loads((folders[True] / "config.json").read_text())["quantization_config"]["quant_method"] == "gptq"

    # A string cut to the 127 bytes an override holds, not inside a character; None left out.
    metadata = overrides({"n": 3, "x": 0.25, "s": "é" * 100, "b": True, "ppl": [12.5, 11.25], "none": None})
    f32 = convert_hf_to_gguf(folders[False], tmp_path / "f32.gguf", "f32")
    old = quantize(builds["patched"], f32, tmp_path / "old.gguf", "Q4_0", metadata=metadata)
    new = convert_hf_to_gguf(folders[True], tmp_path / "new.gguf", "q4_0", metadata)
    assert old.read_bytes() == new.read_bytes()
    assert provenance(new) == [("n", "3"), ("x", "0.25"), ("s", "é" * 63), ("b", "True"), ("ppl", "12.5,11.25")]


def test_the_converter_refuses_a_malformed_metadata_item(tiny_hf, tmp_path):
    with pytest.raises(ConvertError, match="'x' is not a 32-bit unsigned int"):
        convert_hf_to_gguf(tiny_hf("Qwen2ForCausalLM", "tiny-tied"), tmp_path / "o.gguf", "q4_0", {"a.b": "int:x"})
    assert not list(tmp_path.iterdir())
