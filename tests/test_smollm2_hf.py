"""The real-model fixture: SmolLM2-135M as a Hugging Face folder, and the vendored converter."""

import json
import subprocess
import sys

import numpy as np
import pytest
from gguf import GGUFReader

from awq2gguf.convert import ConvertError, convert_hf_to_gguf
from awq2gguf.assets.dev_models import f16_gguf, hf_folder

PROMPT = "The capital of France is Paris. The capital of Germany is"


@pytest.fixture(scope="module")
def hf_dir():
    return hf_folder("smollm2")


def test_hf_folder_converts_back_to_the_f16_gguf_bit_for_bit(hf_dir, tmp_path):
    """transformers undid the converter's Q/K permutation; the vendored converter redoes it."""
    converted = GGUFReader(convert_hf_to_gguf(hf_dir, tmp_path / "conv.gguf", "f16"))
    reference = GGUFReader(f16_gguf("smollm2"))
    assert converted.fields["tokenizer.ggml.pre"].contents() == "smollm"
    ref = {t.name: t for t in reference.tensors}
    assert sorted(t.name for t in converted.tensors) == sorted(ref)
    for t in converted.tensors:
        assert np.array_equal(np.asarray(t.data), np.asarray(ref[t.name].data)), t.name


LLAMA_LOGITS = r"""
import json, sys
from llama_cpp import Llama
llm = Llama(model_path=sys.argv[1], n_ctx=64, logits_all=True, verbose=False)
tokens = [int(t) for t in sys.argv[2].split(",")]
llm.eval(tokens)
print(json.dumps(llm.scores[len(tokens) - 1].tolist()))
"""


def test_hf_logits_match_llama_cpp_on_the_f16_gguf(hf_dir, builds):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(hf_dir)
    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32)
    tokens = tokenizer(PROMPT)["input_ids"]
    with torch.no_grad():
        hf = model(torch.tensor([tokens])).logits[0, -1].numpy()
    proc = subprocess.run([sys.executable, "-c", LLAMA_LOGITS, str(f16_gguf("smollm2")), ",".join(map(str, tokens))],
                          env=builds["stock"].env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    cpp = np.array(json.loads(proc.stdout))
    assert int(hf.argmax()) == int(cpp.argmax())
    assert tokenizer.decode([int(hf.argmax())]).strip() == "Berlin"
    p, q = np.exp(hf - hf.max()), np.exp(cpp - cpp.max())
    p, q = p / p.sum(), q / q.sum()
    assert float((p * (np.log(p) - np.log(q))).sum()) < 1e-3  # F16 weights and activations vs FP32


def test_converter_failure_is_reported_and_leaves_no_file(tmp_path):
    (tmp_path / "config.json").write_text('{"architectures": ["NoSuchForCausalLM"]}')
    with pytest.raises(ConvertError, match="convert_hf_to_gguf.py on .* failed"):
        convert_hf_to_gguf(tmp_path, tmp_path / "out.gguf")
    assert not (tmp_path / "out.gguf").exists() and not (tmp_path / "out.gguf.tmp").exists()
