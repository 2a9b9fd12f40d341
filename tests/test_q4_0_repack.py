"""Repacked Q4_0 on x86 through each build's own entry points: the GEMM/GEMV this CPU's build runs
(patches 0006/0011 on AVX2, 0012/0015/0019 on AVX-512), the decode paths (0017, 0018) and GET_ROWS
from the repacked layout (0004), against ggml's own references (tests/kernels/repack.cpp).
Both widths' kernels on any host: test_q4_0x8_kernels."""

import re

import pytest

from awq2gguf.host import cpu_info
from conftest import run_kernel_test

# Integer block sums are exact; what differs is the order of float accumulation over K/32 blocks.
KERNEL_TOLERANCE = 1e-5
# Repacked vs plain MUL_MAT also quantize the activations through different code paths.
MUL_MAT_TOLERANCE = 1e-4
# tests/kernels/repack.cpp's (K, N) weight shapes and activation row counts M: one op per pair.
N_OPS = 5 * 7
_KERNEL = re.compile(r"kernel (gemm|gemv) K=(\d+) N=(\d+) M=(\d+) max_rel_err (\S+) hash (\w+)")
_MUL_MAT = re.compile(r"mul_mat K=(\d+) N=(\d+) M=(\d+) max_rel_err (\S+)")
_ONE_ROW = re.compile(r"one_row K=(\d+) N=(\d+) M=(\d+) mismatches (\d+)")
_MUL_MAT_ADD = re.compile(r"mul_mat_add K=(\d+) N=(\d+) M=(\d+) (bias|residual) mismatches (\d+)")
_GET_ROWS = re.compile(r"get_rows K=(\d+) N=(\d+) (unsupported|mismatches (\d+))")


@pytest.fixture(scope="module")
def reports(builds):
    return {name: run_kernel_test(build, "repack", "2") for name, build in builds.items()}


@pytest.mark.parametrize("build_name", ["stock", "patched"])
def test_kernels_match_ggml_generic_reference(reports, build_name):
    results = _KERNEL.findall(reports[build_name])
    assert {kind for kind, *_ in results} == {"gemm", "gemv"} and len(results) >= 40
    too_far = [r for r in results if not float(r[4]) <= KERNEL_TOLERANCE]
    assert too_far == []


def test_patched_kernels_give_stock_kernels_output_bit_for_bit(reports):
    """The AVX2 kernel sums the same integers and applies the scales in the same order as stock's
    LUT kernel, so its logits are identical; only the instructions that get there differ."""
    hashes = {name: [(r[:4], r[5]) for r in _KERNEL.findall(out)] for name, out in reports.items()}
    assert hashes["patched"] == hashes["stock"]


@pytest.mark.parametrize("build_name", ["stock", "patched"])
def test_repacked_mul_mat_matches_plain_q4_0(reports, build_name):
    results = _MUL_MAT.findall(reports[build_name])
    assert len(results) == N_OPS
    assert [r for r in results if not float(r[-1]) <= MUL_MAT_TOLERANCE] == []


@pytest.mark.parametrize("build_name", ["stock", "patched"])
def test_one_activation_row_gives_the_chunked_gemv_bit_for_bit(reports, build_name):
    """Decode: the patched build quantizes the single row in every thread and splits the columns
    statically (no barrier); each column is still the same GEMV, so its output bits do not change."""
    results = _ONE_ROW.findall(reports[build_name])
    assert len(results) == 6 * 5  # M 3, 4, 5, 8, 13 and 64 per shape
    past_the_gemm = [r for r in results if int(r[2]) % 4 != 0]
    assert len(past_the_gemm) == 3 * 5 and all(r[3] == "0" for r in past_the_gemm)


def test_batched_decode_gives_each_stream_its_lone_row_bits(reports):
    """Patched with AVX-512: batches of fewer than 8 rows (several decode streams) go through the
    multi-row GEMV whole, which reads each weight once for all rows and gives each row the bits it
    gets alone; from 8 rows the GEMM takes them in fours."""
    if not {"avx512f", "avx512bw"} <= cpu_info().flags:
        pytest.skip("the multi-row GEMV is the AVX-512 build's; an AVX2 build keeps the GEMM for 4 rows")
    batches = [r for r in _ONE_ROW.findall(reports["patched"]) if int(r[2]) < 8]
    assert len(batches) == 3 * 5 and all(r[3] == "0" for r in batches)  # M 3, 4 and 5 per shape


@pytest.mark.parametrize("build_name", ["stock", "patched"])
def test_a_product_and_the_add_after_it_give_the_two_ops_bit_for_bit(reports, build_name):
    """Decode: the patched build adds a Q/K/V bias or the residual in the GEMV's own pass (patch
    0018, no barrier between MUL_MAT and ADD), with the same float additions as the ADD op; stock
    runs the two ops, the reference for the same check."""
    results = _MUL_MAT_ADD.findall(reports[build_name])
    assert len(results) == 2 * N_OPS and {r[3] for r in results} == {"bias", "residual"}
    assert [r for r in results if r[4] != "0"] == []


def test_get_rows_from_the_repacked_layout_is_bit_exact(reports):
    patched = _GET_ROWS.findall(reports["patched"])
    assert len(patched) == N_OPS and all(r[2] != "unsupported" and r[3] == "0" for r in patched)
    # Stock has no GET_ROWS on CPU_REPACK: that is why it keeps a second, plain copy of tied embeddings.
    assert all(r[2] == "unsupported" for r in _GET_ROWS.findall(reports["stock"]))
