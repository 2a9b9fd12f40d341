"""The patched tree's x86 Q4_0 GEMM/GEMV (tests/kernels/x86/q4_0x8_kernels.cpp) on every x86 host,
whichever of them its build runs: the AVX2 kernels (built at x86-64-v3, which every host here
runs), the AVX-512 ones natively where the CPU has AVX-512 F/BW/VNNI, and always through SIMDe (the
AVX-512 and VNNI intrinsics emulated with AVX2), so an AVX2-only machine checks the AVX-512 code
and an AVX-512 machine the AVX2 code. Each kernel against ggml's scalar reference and, bit for
bit, against the build's own kernel: every x86 kernel gives stock's bits (test_q4_0_repack
compares the builds)."""

import re

import pytest

from awq2gguf.host import cpu_info
from conftest import run_kernel_test

TOLERANCE = 1e-5  # float accumulation order only, as for the other repacked kernels
_LINE = re.compile(r"(avx2|avx512) (vnni|maddubs) (gemm|gemv|gemv_4_streams|gemv_rows) K=(\d+) N=(\d+) M=(\d+) "
                   r"max_rel_err (\S+) hash (\w+) build_hash (\w+)")
_NATIVE_FLAGS = {"avx512f", "avx512bw", "avx512_vnni"}
_SHAPES, _ROW_COUNTS, _GEMM_ROW_COUNTS = 5, 7, 5  # the program's cases; the GEMM takes M % 4 == 0

# What each program checks: width, flavours, and the kernels each flavour has (the GEMVs run at
# every row count, the GEMM at those divisible by 4). simde: built at x86-64-v3 (AVX2, FMA,
# F16C), which keeps SIMDe from using AVX-512 even on a CPU that has it (native/CMakeLists.txt).
_AVX512 = ("avx512", ("vnni", "maddubs"), ("gemm", "gemv", "gemv_4_streams", "gemv_rows"))
PROGRAMS = {"avx2": ("avx2", ("maddubs",), ("gemm", "gemv")), "avx512-simde": _AVX512, "avx512-native": _AVX512}


@pytest.mark.parametrize("program", PROGRAMS)
def test_x86_kernels_match_the_reference_and_the_build_bit_for_bit(builds, program):
    if program == "avx512-native" and not _NATIVE_FLAGS <= cpu_info().flags:
        pytest.skip(f"this CPU lacks {sorted(_NATIVE_FLAGS - cpu_info().flags)}: checked through SIMDe only")
    width, flavours, kinds = PROGRAMS[program]
    out = run_kernel_test(builds["patched"], f"q4_0x8_{program}")
    assert out.splitlines()[0] == f"mode {program.rsplit('-')[-1]}"
    results = _LINE.findall(out)
    assert {r[:3] for r in results} == {(width, f, k) for f in flavours for k in kinds}
    gemvs = len(kinds) - 1
    assert len(results) == _SHAPES * len(flavours) * (gemvs * _ROW_COUNTS + _GEMM_ROW_COUNTS)
    assert [r for r in results if not float(r[6]) <= TOLERANCE] == []
    assert [r for r in results if r[7] != r[8]] == []
