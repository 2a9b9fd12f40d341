"""The third development model: Gemma 3 270M rebuilt from its Q4_K_M GGUF as a Hugging Face folder."""

import subprocess
import sys

import numpy as np
import pytest
import torch
from gguf import GGUFReader

from awq2gguf.assets.dev_models import f16_gguf, hf_folder, source_gguf
from awq2gguf.convert import convert_hf_to_gguf
from conftest import llama_cpp_logits
from test_awq2gguf_cli import kl_to

# Runs of spaces, tabs and newlines are user-defined pieces, which both tokenizers must match whole.
PROMPT = ("The tower is 324 metres tall, about the same height as an 81-storey building.\n\n\nIts base is "
          "square,  measuring 125 metres\ton each side.\n    During its construction")
VOCABULARY = ("tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type")
LLAMA_TOKENS = r"""
import json, sys
from llama_cpp import Llama
llm = Llama(model_path=sys.argv[1], vocab_only=True, verbose=False)
print(json.dumps(llm.tokenize(sys.argv[2].encode())))
"""


@pytest.fixture(scope="module")
def hf_dir():
    return hf_folder("gemma3")


def test_rebuilt_folder_converts_back_to_the_gguf(hf_dir, tmp_path):
    """The same vocabulary (pieces, scores, user-defined and control types) and the same F16
    matrices; norms, stored as 1 + w, come back within FP32 rounding of w + 1 - 1."""
    converted = GGUFReader(convert_hf_to_gguf(hf_dir, tmp_path / "conv.gguf", "f16"))
    reference = GGUFReader(f16_gguf("gemma3"))
    assert converted.fields["tokenizer.ggml.model"].contents() == "llama"
    for key in VOCABULARY:
        assert converted.fields[key].contents() == reference.fields[key].contents(), key
    ref = {t.name: t for t in reference.tensors}
    assert sorted(t.name for t in converted.tensors) == sorted(ref)
    for t in converted.tensors:
        got, want = np.asarray(t.data), np.asarray(ref[t.name].data)
        if t.name.endswith("norm.weight"):
            assert np.allclose(got, want, rtol=1e-6, atol=1e-6), t.name
        else:
            assert np.array_equal(got, want), t.name


def test_hf_model_and_tokenizer_match_llama_cpp_on_the_gguf(hf_dir, builds):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(hf_dir)
    assert len(tokenizer) == len(GGUFReader(source_gguf("gemma3")).fields["tokenizer.ggml.tokens"].data)
    tokens = tokenizer(PROMPT)["input_ids"]
    proc = subprocess.run([sys.executable, "-c", LLAMA_TOKENS, str(source_gguf("gemma3")), PROMPT],
                          env=builds["stock"].env(), capture_output=True, text=True, timeout=300, check=True)
    assert tokens == [int(t) for t in proc.stdout.strip()[1:-1].split(",")]
    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32)
    with torch.no_grad():
        fp = model(torch.tensor([tokens])).logits[0].numpy()
    for build in builds.values():
        cpp = llama_cpp_logits(build, f16_gguf("gemma3"), tokens)
        # measured 2.8e-6 (stock) and 3.2e-6 (patched): F16 activations against FP32
        assert kl_to(fp, cpp) < 2e-5, build.name
        assert (cpp.argmax(-1) == fp.argmax(-1)).mean() > 0.9
