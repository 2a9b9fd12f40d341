"""scripts/as-avx2-host.sh: a command under it sees an AVX2-only host (a Zen 3) in both places the
toolkit asks: the compilers' -march=native and /proc/cpuinfo. The rest of the machine does not."""

import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from awq2gguf.host import cpu_info

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "as-avx2-host.sh"

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64" or os.geteuid() != 0 or not shutil.which("unshare"),
                                reason="the stand-in needs an x86-64 host, root and unshare")


def _defines(*run: str) -> set[str]:
    out = subprocess.run([*run, "c++", "-march=native", "-dM", "-E", "-x", "c++", "/dev/null"], capture_output=True,
                         text=True, check=True).stdout
    return {line.split()[1] for line in out.splitlines()}


def test_a_command_under_it_sees_avx2_and_no_avx512_and_the_host_is_unchanged():
    before = Path("/proc/cpuinfo").read_text()
    inside = subprocess.run([str(SCRIPT), sys.executable, "-c", "from awq2gguf.host import cpu_info; i = cpu_info(); "
                             "print(i.simd); print(i.fast_bf16)"], capture_output=True, text=True, check=True)
    simd, fast_bf16 = inside.stdout.split("\n")[:2]
    assert simd.startswith("AVX2") and simd.endswith("no AVX-512")
    assert fast_bf16 == "False"

    defines = _defines(str(SCRIPT))
    assert "__AVX2__" in defines and "__FMA__" in defines and "__F16C__" in defines
    assert not any(d.startswith("__AVX512") or d.startswith("__AMX") for d in defines)

    assert Path("/proc/cpuinfo").read_text() == before  # its own mount namespace only
    if "avx512f" in cpu_info().flags:
        assert "__AVX512F__" in _defines()


def test_it_says_what_it_needs():
    done = subprocess.run([str(SCRIPT)], capture_output=True, text=True)
    assert done.returncode == 2 and "usage:" in done.stderr
