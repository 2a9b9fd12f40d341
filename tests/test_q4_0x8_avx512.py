"""The AVX-512 Q4_0 GEMM/GEMV of the patched tree (tests/kernels/x86/q4_0x8_avx512.cpp), on every
x86 host: natively where the CPU has AVX-512 F/BW/VNNI, and always through SIMDe (the AVX-512 and
VNNI intrinsics emulated with AVX2), so an AVX2-only machine checks the same code. Each flavour
(VPDPBUSD with VNNI, VPMADDUBSW without), GEMM and both GEMVs (one stream, and the four streams
Intel CPUs run, one row per call and several, as batched decode calls it), against ggml's scalar reference and, bit for bit, against the build's own kernel:
stock's and the patched AVX2 kernel give the same bits (test_q4_0_repack)."""

import re

import pytest

from awq2gguf.host import cpu_info
from conftest import run_kernel_test

TOLERANCE = 1e-5  # float accumulation order only, as for the other repacked kernels
_LINE = re.compile(r"avx512 (vnni|maddubs) (gemm|gemv|gemv_4_streams|gemv_rows) K=(\d+) N=(\d+) M=(\d+) max_rel_err (\S+) hash (\w+) build_hash (\w+)")
_NATIVE_FLAGS = {"avx512f", "avx512bw", "avx512_vnni"}


# simde: built at x86-64-v3 (AVX2, FMA, F16C), which keeps SIMDe from using AVX-512 even on a CPU
# that has it (native/CMakeLists.txt).
MODES = ("simde", "native")


@pytest.mark.parametrize("mode", MODES)
def test_avx512_kernels_match_the_reference_and_the_build_bit_for_bit(builds, mode):
    if mode == "native" and not _NATIVE_FLAGS <= cpu_info().flags:
        pytest.skip(f"this CPU lacks {sorted(_NATIVE_FLAGS - cpu_info().flags)}: checked through SIMDe only")
    out = run_kernel_test(builds["patched"], f"q4_0x8_avx512-{mode}")
    assert out.splitlines()[0] == f"mode {mode}"
    results = _LINE.findall(out)
    kinds = ("gemm", "gemv", "gemv_4_streams", "gemv_rows")
    assert {(f, k) for f, k, *_ in results} == {(f, k) for f in ("vnni", "maddubs") for k in kinds}
    # 5 shapes x 2 flavours x (the GEMVs row by row and all rows at once at 7 row counts, GEMM at the 5 with M % 4 == 0)
    assert len(results) == 5 * 2 * (3 * 7 + 5)
    assert [r for r in results if not float(r[5]) <= TOLERANCE] == []
    assert [r for r in results if r[6] != r[7]] == []
