"""`awq2gguf --qtype` for llama.cpp's mixtures end to end, on a tiny model whose rows take the
K-quants' 256-weight blocks (but for the MLP's down projection, which falls back)."""

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFReader

from awq2gguf.assets.synthetic import SHAPES
from awq2gguf.assets.synthetic_hf import write_synthetic_hf
from awq2gguf.convert import convert_hf_to_gguf
from awq2gguf.llama_quantize import quantize
from conftest import llama_cpp_logits
from test_awq2gguf_cli import FAST, PROMPT_IDS, fp_logits, kl_to, run

SEARCH_OFF = ("--alpha-steps", "0", "--no-clip", "--no-compensate", "--no-imatrix", "--calib-held-out", "0")


@pytest.fixture(scope="module")
def tiny_k(tmp_path_factory):
    return write_synthetic_hf(SHAPES["tiny-k"], tmp_path_factory.mktemp("hf") / "tiny-k")


@pytest.fixture(scope="module")
def tiny_k_f16(tiny_k, tmp_path_factory):
    return convert_hf_to_gguf(tiny_k, tmp_path_factory.mktemp("f16") / "tiny-k-f16.gguf")


def _tensors(path):
    return {t.name: (t.tensor_type, np.asarray(t.data)) for t in GGUFReader(path).tensors}


@pytest.mark.parametrize("qtype", ["q4_k_m", "iq4_xs", "q5_k_m"])
def test_with_the_search_off_the_file_is_llama_quantize_of_the_f16_gguf(tiny_k, tiny_k_f16, calib_text, builds,
                                                                        tmp_path, qtype):
    out = tmp_path / "out.gguf"
    result = run(tiny_k, out, "--qtype", qtype, "--calib", calib_text, *SEARCH_OFF, *FAST)
    assert result.exit_code == 0, result.output
    expected = _tensors(quantize(builds["stock"], tiny_k_f16, tmp_path / "stock.gguf", qtype.upper()))
    got = _tensors(out)
    assert got.keys() == expected.keys()
    for name, (kind, data) in got.items():
        assert kind == expected[name][0], name
        assert np.array_equal(data, expected[name][1]), name


def test_q4_k_m_searched_on_its_own_grids_with_an_imatrix(tiny_k, tiny_k_f16, calib_text, builds, tmp_path):
    """The searched Q4_K_M file: llama.cpp's mixture (the fallback said), made with the search's
    imatrix, run by both builds, and nearer the FP model than stock Q4_K_M on the same weights."""
    out = tmp_path / "out.gguf"
    result = run(tiny_k, out, "--qtype", "Q4_K_M", "--calib", calib_text, *FAST)
    assert result.exit_code == 0, result.output
    printed = " ".join(result.output.split())
    assert "do not take Q6_K's blocks of 256: Q8_0 instead, as llama-quantize falls back" in printed
    assert "do not take Q4_K's blocks of 256: Q5_0 instead" in printed
    stock = quantize(builds["stock"], tiny_k_f16, tmp_path / "stock.gguf", "Q4_K_M")
    assert {n: k for n, (k, _) in _tensors(out).items()} == {n: k for n, (k, _) in _tensors(stock).items()}
    # every block matrix and the tied output (7 per block, 1) but those in Q8_0, whose quantizer has no use for one
    types = [k for k, _ in _tensors(out).values()]
    entries = 7 * SHAPES["tiny-k"].n_layer + 1 - types.count(GGMLQuantizationType.Q8_0)
    assert GGUFReader(out).fields["quantize.imatrix.entries_count"].contents() == entries
    fp = fp_logits(tiny_k)
    for build in builds.values():
        ours, theirs = (kl_to(fp, llama_cpp_logits(build, f, PROMPT_IDS)) for f in (out, stock))
        assert ours < theirs, (build.name, ours, theirs)
