"""Repacked K-quants on x86 through each build's CPU backend, against the same weight in a plain
buffer, which runs ggml's own ggml_vec_dot_qN_K_q8_K (tests/kernels/repack.cpp):
- Q6_K: the patched build's AVX2 GEMV/GEMM for the q6_K_8x8 layout, and GET_ROWS from it, so a tied
  Q6_K embedding is stored once. Stock has no x86 layout for Q6_K: its Q4_K_M files run their Q6_K
  tensors through that vec_dot.
- Q4_K: stock's AVX2 kernels for the q4_K_8x8 layout, whose GEMV the patched build prefetches; a
  prefetch is only a hint, so both builds give the same bits."""

import re

import pytest

from awq2gguf.host import cpu_info
from conftest import run_kernel_test
from test_q4_0_repack import _GET_ROWS, _MUL_MAT_ADD, _ONE_ROW, MUL_MAT_TOLERANCE

# tests/kernels/repack.cpp's K-quant weight shapes and activation row counts.
SHAPES, ROWS = 5, 7
_LAYOUT = re.compile(r"layout K=(\d+) N=(\d+) (repacked|none)")
_MUL_MAT = re.compile(r"mul_mat K=(\d+) N=(\d+) M=(\d+) max_rel_err (\S+) hash (\w+)")

pytestmark = pytest.mark.skipif("avx2" not in cpu_info().flags, reason="these layouts are the x86 AVX2 build's")


@pytest.fixture(scope="module")
def reports(builds):
    return {(name, qtype): run_kernel_test(build, "repack", "2", qtype)
            for name, build in builds.items() for qtype in ("q4_K", "q6_K")}


def test_patched_repacks_q6_K_and_stock_does_not(reports):
    assert [r[2] for r in _LAYOUT.findall(reports["patched", "q6_K"])] == ["repacked"] * SHAPES
    assert [r[2] for r in _LAYOUT.findall(reports["stock", "q6_K"])] == ["none"] * SHAPES


@pytest.mark.parametrize("qtype", ["q4_K", "q6_K"])
def test_repacked_mul_mat_matches_ggml_vec_dot(reports, qtype):
    """Every row count: decode (the GEMV), the 4-row GEMM groups and the rows past them."""
    results = _MUL_MAT.findall(reports["patched", qtype])
    assert len(results) == SHAPES * ROWS
    assert [r for r in results if not float(r[3]) <= MUL_MAT_TOLERANCE] == []


@pytest.mark.parametrize("qtype", ["q4_K", "q6_K"])
def test_decode_paths_give_the_chunked_gemv_bit_for_bit(reports, qtype):
    """The lone row (decode, no barrier) and the MUL_MAT + ADD fused pass run the same GEMV as the
    rows past the GEMM in a batch: the same bits."""
    out = reports["patched", qtype]
    past_the_gemm = [r for r in _ONE_ROW.findall(out) if int(r[2]) % 4 != 0]
    assert len(past_the_gemm) == 3 * SHAPES and all(r[3] == "0" for r in past_the_gemm)
    fused = _MUL_MAT_ADD.findall(out)
    assert len(fused) == 2 * SHAPES * ROWS and all(r[4] == "0" for r in fused)


def test_prefetching_q4_K_gemv_gives_stock_bits(reports):
    patched, stock = (_MUL_MAT.findall(reports[b, "q4_K"]) for b in ("patched", "stock"))
    assert len(stock) == SHAPES * ROWS
    assert [(r[:3], r[4]) for r in patched] == [(r[:3], r[4]) for r in stock]


def test_get_rows_from_repacked_q6_K_is_bit_exact(reports):
    results = _GET_ROWS.findall(reports["patched", "q6_K"])
    assert len(results) == SHAPES * ROWS
    assert [r for r in results if r[3] != "0"] == []
