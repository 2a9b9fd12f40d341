"""The grids against ggml and llama-quantize: each grid's blocks are the bytes llama-quantize writes,
with and without an imatrix, and the plan gives every matrix the type llama-quantize gives it."""

import re

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as T
from gguf import GGUFReader

from awq2gguf.assets.synthetic import SHAPES, write_synthetic_gguf
from torch import nn

from awq2gguf import grids
from awq2gguf.grids import Q4_0, Q4_K, Q8_0, Grid
from awq2gguf.grids.imatrix import write_imatrix
from awq2gguf.grids.plan import Matrix, Model, choose
from awq2gguf.llama_quantize import quantize
from awq2gguf.modes import QType

MIXTURES = [q for q in QType if q not in (QType.Q4_0, QType.F16)]
_NAME = re.compile(r"blk\.(\d+)\.(\w+)\.weight")


@pytest.fixture(scope="module")
def tiny_k(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny-k")
    return {name: write_synthetic_gguf(SHAPES[name], out / f"{name}-f16.gguf") for name in ("tiny-k", "tiny-k-untied")}


def _matrices(path):
    """{Matrix: tensor} of a GGUF's 2-D weights."""
    out = {}
    for t in GGUFReader(path).tensors:
        if len(t.shape) != 2:
            continue
        if m := _NAME.fullmatch(t.name):
            role, layer = m[2], int(m[1])
        else:
            role, layer = t.name.removesuffix(".weight"), None
        out[Matrix(role, layer, int(t.shape[0]), int(t.shape[1]))] = t
    return out


def _model(shape_name):
    s = SHAPES[shape_name]
    return Model(s.n_layer, s.n_head // s.n_head_kv, s.tied_embeddings)


def _importance(m: Matrix) -> torch.Tensor:
    g = torch.Generator().manual_seed(m.n_per_row * 1000 + (m.layer or 0))
    return torch.rand(m.n_per_row, generator=g).pow(4) * 10 + 1e-3  # a few channels matter most


# Every mixture without an imatrix; with one, those whose rules or quantizers read it; untied, the
# default mixture (a 151936-row embedding table makes each case ~20 s on 2 cores).
CASES = ([("tiny-k", q, False) for q in MIXTURES] + [("tiny-k", q, True) for q in (QType.Q4_K_M, QType.IQ4_XS)]
         + [("tiny-k-untied", QType.Q4_K_M, True)])


@pytest.mark.parametrize("shape, qtype, weighted", CASES, ids=lambda v: {True: "imatrix", False: "plain"}.get(v, v))
def test_plan_and_grids_are_llama_quantize(tiny_k, builds, tmp_path, shape, qtype, weighted):
    src = tiny_k[shape]
    f16 = _matrices(src)
    args = ()
    if weighted:
        imatrix = write_imatrix(tmp_path / "imatrix.dat", {t.name: _importance(m) for m, t in f16.items()
                                                             if m.role != "token_embd" or SHAPES[shape].tied_embeddings})
        args = ("--imatrix", str(imatrix))
    out = quantize(builds["stock"], src, tmp_path / "out.gguf", qtype, extra_args=args)
    quantized = _matrices(out)
    for m, t in quantized.items():
        choice = choose(qtype, m, _model(shape), imatrix=weighted)
        assert choice.qtype == T(t.tensor_type), m.name
        w = torch.from_numpy(np.asarray(f16[m].data, dtype=np.float32).reshape(m.n_rows, m.n_per_row))
        importance = _importance(m) if weighted and (m.role != "token_embd" or SHAPES[shape].tied_embeddings) else None
        blocks = choice.grid.encode(w, importance)
        assert torch.equal(blocks, torch.from_numpy(np.asarray(t.data).reshape(blocks.shape))), m.name


@pytest.mark.parametrize("grid", [Q4_0, Q8_0])
def test_torch_grids_are_ggml(grid):
    """Q4_0 and Q8_0 round trip in torch: the same values as ggml's own quantizer and to_float."""
    w = torch.randn(64, 256) * torch.logspace(-3, 1, 64)[:, None]
    w[3, :32] = 0
    w[5, 7] = -w[5].abs().max()  # a tie in magnitude
    assert torch.equal(grid.fake_quant(w), Grid.fake_quant.__func__(grid, w))


def test_named_grid():
    assert Grid.named("iq4_xs").qtype == T.IQ4_XS
    with pytest.raises(ValueError, match="no grid for ggml type 'Q3_Q'"):
        Grid.named("Q3_Q")


def test_fallback_is_stated():
    """A row length a 256-weight type does not divide takes llama.cpp's 32-weight fallback, and says so."""
    down = Matrix("ffn_down", 0, 640, 256)
    choice = choose(QType.Q4_K_M, down, Model(8, 4, True))
    assert (choice.qtype, choice.fallback_from) == (T.Q8_0, T.Q6_K)
    assert choose(QType.Q4_K_M, Matrix("ffn_down", 1, 640, 256), Model(8, 4, True)).qtype == T.Q5_0
    assert choose(QType.Q4_K_M, Matrix("ffn_down", 1, 100, 256), Model(8, 4, True)).qtype == T.F16


def test_each_module_meets_its_own_grid():
    """A module assigned a grid is fake-quantized on it (a tied pair shares one), weighted by the
    importance set on it only where its file has an imatrix entry; an unassigned one meets Q4_0."""
    w = torch.randn(8, 256, generator=torch.Generator().manual_seed(1))
    kept, other, head, embed = nn.Linear(256, 8), nn.Linear(256, 8), nn.Linear(256, 8), nn.Embedding(8, 256)
    grids.assign(kept, Q8_0, weighted=True)
    grids.assign((head, embed), Q4_K, weighted=True)
    assert torch.equal(grids.fake_quant(kept, w), Q8_0.fake_quant(w))
    assert torch.equal(grids.fake_quant(other, w), Q4_0.fake_quant(w))
    # Q8_0's grid is 16 times finer: its error is far below Q4_0's.
    assert (grids.fake_quant(kept, w) - w).abs().max() < (grids.fake_quant(other, w) - w).abs().max() / 8
    importance = torch.rand(256, generator=torch.Generator().manual_seed(2)).pow(8)
    grids.set_importance(kept, importance)  # Q8_0's quantizer has no use for it
    grids.set_importance(head, importance)
    assert grids.importance_of(kept) is None and grids.importance_of(embed) is importance
    weighted = grids.fake_quant(embed, w)
    assert torch.equal(weighted, Q4_K.fake_quant(w, importance))
    assert not torch.equal(weighted, Q4_K.fake_quant(w))
