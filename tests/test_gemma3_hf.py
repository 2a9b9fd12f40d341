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


@pytest.mark.parametrize("name", ["gemma3", "smollm2"])
def test_file_windows_start_as_the_tokenizer_starts_a_text(name, tmp_path):
    """Gemma's calibration windows start with BOS as llama-perplexity's do (without it Gemma's
    hidden states are far from any it meets in use); SmolLM2's tokenizer adds nothing, so its
    windows are text only. The bench's decoded windows hold the text alone, and read back the same."""
    from transformers import AutoTokenizer

    from awq2gguf.bench.eval_text import calibration_windows
    from awq2gguf.calibration import from_file, from_text

    tokenizer = AutoTokenizer.from_pretrained(hf_folder(name))
    text_ids = tokenizer(PROMPT, add_special_tokens=False)["input_ids"]
    calib = from_text(tokenizer, PROMPT, 2, 12, "prompt")
    start = [tokenizer.bos_token_id] if name == "gemma3" else []
    assert calib.input_ids[:, :len(start)].tolist() == [start] * 2
    first, last = calib.input_ids[:, len(start):].tolist()
    assert first == text_ids[:12 - len(start)] and last == text_ids[-(12 - len(start)):]
    text = tmp_path / "eval.txt"
    text.write_text("filler\n" * 200 + PROMPT * 3)  # the learning half is the second
    windows = calibration_windows(hf_folder(name), text, 2, 12)
    assert not any(tokenizer.bos_token and tokenizer.bos_token in w for w in windows)
    (tmp_path / "calib.txt").write_text(windows[0])
    read_back = from_file(tokenizer, tmp_path / "calib.txt", 1, 12).input_ids[0].tolist()
    assert read_back == start + tokenizer(windows[0], add_special_tokens=False)["input_ids"][:12 - len(start)]
