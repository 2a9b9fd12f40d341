"""Patch 0001: the patched llama-quantize Q4_0 keeps every 2-D weight in Q4_0; stock loads the file."""

import re

import pytest
from gguf import GGMLQuantizationType, GGUFReader

from conftest import generate


def types_2d(path):
    return {t.name: t.tensor_type for t in GGUFReader(path).tensors if len([d for d in t.shape if d > 1]) == 2}


@pytest.mark.parametrize("shape", ["tiny-tied", "tiny-untied"])
def test_patched_q4_0_puts_every_2d_weight_in_q4_0(tiny_q4_0, shape):
    types = types_2d(tiny_q4_0[(shape, "patched")])
    assert "token_embd.weight" in types
    assert ("output.weight" in types) == (shape == "tiny-untied")
    not_q4_0 = {n: t.name for n, t in types.items() if t != GGMLQuantizationType.Q4_0}
    assert not_q4_0 == {}


@pytest.mark.parametrize("shape", ["tiny-tied", "tiny-untied"])
def test_stock_q4_0_keeps_output_tensor_at_higher_precision(tiny_q4_0, shape):
    types = types_2d(tiny_q4_0[(shape, "stock")])
    output = "token_embd.weight" if shape == "tiny-tied" else "output.weight"
    assert types[output] != GGMLQuantizationType.Q4_0
    assert types["blk.0.ffn_down.weight"] == GGMLQuantizationType.Q4_0


def test_patched_output_tensor_type_override_still_wins(tiny_f16, builds, tmp_path):
    from awq2gguf.llama_quantize import quantize

    out = quantize(builds["patched"], tiny_f16["tiny-tied"], tmp_path / "o.gguf", "Q4_0",
                   extra_args=("--output-tensor-type", "q8_0"))
    assert types_2d(out)["token_embd.weight"] == GGMLQuantizationType.Q8_0


def test_patched_file_is_smaller(tiny_q4_0):
    assert tiny_q4_0[("tiny-tied", "patched")].stat().st_size < tiny_q4_0[("tiny-tied", "stock")].stat().st_size


@pytest.mark.parametrize("shape", ["tiny-tied", "tiny-untied"])
def test_stock_loads_and_runs_the_patched_file(builds, tiny_q4_0, shape):
    proc = generate(builds["stock"], tiny_q4_0[(shape, "patched")], n=8)
    assert proc.returncode == 0, proc.stderr[-2000:]
    # 8 generated tokens: the first is sampled after prompt eval, 7 more decode runs.
    assert re.search(r"eval time =.*/\s+7 runs", proc.stderr), proc.stderr[-2000:]
    assert proc.stdout.startswith("The quick brown fox") and len(proc.stdout) > len("The quick brown fox")
