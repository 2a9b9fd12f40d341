"""AutoRound's gguf:q4_0 as `bench awq` runs it: its calibration lines, its file, and that file at our size."""

import json

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFReader
from gguf.quants import dequantize, quantize

from awq2gguf.bench import autoround
from awq2gguf.checkpoint import load_tokenizer

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not autoround.available(), reason="AutoRound is not installed: `make autoround`")]

N_SAMPLES, N_TOKENS = 4, 32


def _tensors(path):
    return {t.name: t for t in GGUFReader(path).tensors}


def test_every_calibration_line_holds_the_tokens_autoround_keeps(tiny_hf, calib_text, tmp_path):
    model = tiny_hf("Qwen2ForCausalLM", "tiny-tied")
    lines = autoround.calibration_jsonl(model, calib_text, N_SAMPLES, N_TOKENS, tmp_path / "c.jsonl").read_text()
    texts = [json.loads(line)["text"] for line in lines.splitlines()]
    tokenizer = load_tokenizer(model)
    assert len(texts) == N_SAMPLES
    assert all(len(tokenizer(t, add_special_tokens=False)["input_ids"]) >= N_TOKENS for t in texts)
    assert all(t in calib_text.read_text() for t in texts[:1])  # the evaluation text itself, not a paraphrase


def test_the_tied_matrix_put_in_q4_0_leaves_autoround_s_blocks_as_they_are(tiny_hf, calib_text, builds, tmp_path):
    model = tiny_hf("Qwen2ForCausalLM", "tiny-tied")
    jsonl = autoround.calibration_jsonl(model, calib_text, N_SAMPLES, N_TOKENS, tmp_path / "c.jsonl")
    written = tmp_path / "ar.gguf"
    seconds, peak = autoround.quantize_q4_0(model, jsonl, N_SAMPLES, N_TOKENS, 2, written, threads=2)
    assert written.is_file() and seconds > 0 and peak > 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ar.gguf", "c.jsonl"]  # its work folder is gone
    assert autoround.not_q4_0(written) == "token_embd Q8_0"

    ours = autoround.at_q4_0(builds["patched"], written, tmp_path / "ar-Q4_0.gguf")
    assert autoround.not_q4_0(ours) == ""
    before, after = _tensors(written), _tensors(ours)
    assert before.keys() == after.keys()
    for name, t in before.items():
        if t.tensor_type == GGMLQuantizationType.Q8_0:  # rounded plainly, as ggml's reference Q4_0 does
            values = dequantize(t.data, t.tensor_type)
            expected = quantize(values, GGMLQuantizationType.Q4_0)
            assert np.array_equal(np.asarray(after[name].data).reshape(expected.shape), expected), name
        else:
            assert after[name].tensor_type == t.tensor_type, name
            assert np.array_equal(np.asarray(after[name].data), np.asarray(t.data)), name
