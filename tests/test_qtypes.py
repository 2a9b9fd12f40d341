"""`awq2gguf --qtype` for llama.cpp's mixtures end to end, on a tiny model whose rows take the
K-quants' 256-weight blocks (but for the MLP's down projection, which falls back)."""

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFReader
from torch import nn

from awq2gguf import grids, tune_blocks

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


def test_block_wise_tuned_q4_k_m_is_the_model_trained_through_its_grids(tiny_k, calib_text, tmp_path, monkeypatch):
    """--qtype Q4_K_M --tune-steps: each block trains through its matrices' own grids (Q4_K, Q6_K,
    the fallbacks), weighted by their imatrix entries; OUT's blocks are ggml's quantization of the
    weights its training left with those entries, and the training moved some across the grid."""
    trained = []

    def catching(layer, *args, **kwargs):
        before = {n: m.weight.detach().clone() for n, m in layer.named_modules() if isinstance(m, nn.Linear)}
        losses = train(layer, *args, **kwargs)
        trained.append({n: (grids.grid_of(m), grids.importance_of(m), before[n], m.weight.detach().clone())
                        for n, m in layer.named_modules() if isinstance(m, nn.Linear)})
        return losses
    train = tune_blocks._train
    monkeypatch.setattr(tune_blocks, "_train", catching)
    out = tmp_path / "out.gguf"
    result = run(tiny_k, out, "--qtype", "Q4_K_M", "--calib", calib_text, "--tune-steps", "4", "--tune-mode", "blocks",
                 "--tune-lr", "0.5", "--calib-held-out", "0", *FAST)
    assert result.exit_code == 0, result.output
    assert "tuning 8 blocks through Q4_K_M's grids" in " ".join(result.output.split())
    tensors = {t.name: t for t in GGUFReader(out).tensors}
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN2, SHAPES["tiny-k"].n_layer)
    kinds, moved = set(), 0
    for i, matrices in enumerate(trained):
        for local, (grid, importance, before, after) in matrices.items():
            t = tensors[names.get_name(f"model.layers.{i}.{local}.weight", try_suffixes=(".weight",))]
            assert t.tensor_type == grid.qtype, (i, local)
            assert (importance is not None) == grid.weighted, (i, local)
            want = grid.encode(after, importance).numpy()
            assert np.array_equal(np.asarray(t.data).reshape(want.shape), want), (i, local)
            moved += not np.array_equal(want, grid.encode(before, importance).numpy())
            kinds.add(grid.qtype)
    assert {GGMLQuantizationType.Q4_K, GGMLQuantizationType.Q6_K} <= kinds
    assert moved > 0
