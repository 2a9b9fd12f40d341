"""Quantized dot products of each x86 build against an exact reference (tests/kernels/vec_dot.cpp).
The same kernel test runs on the ARM builds under QEMU in test_arm.py."""

import re

import pytest

from conftest import run_kernel_test

TOLERANCE = 1e-4  # relative to the sum of |block dots|; the AVX2 kernels reach about 7e-6
_LINE = re.compile(r"vec_dot (\S+) n=(\d+) nrc=(\d) max_rel_err (\S+)")


@pytest.mark.parametrize("build_name", ["stock", "patched"])
def test_dot_products_match_the_exact_reference(builds, build_name):
    out = run_kernel_test(builds[build_name], "vec_dot")
    errors = {(m[1], int(m[2]), int(m[3])): float(m[4]) for m in _LINE.finditer(out)}
    assert {t for t, _, _ in errors} == {"q4_0", "q4_1", "q5_0", "q8_0", "q4_K", "q6_K"} and len(errors) >= 30
    assert {k: e for k, e in errors.items() if not e <= TOLERANCE} == {}
