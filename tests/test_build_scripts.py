"""scripts/cmake-common.sh: a build dir follows the flags it is configured with. CMake keeps every
-D value in its cache, so a dir that is merely re-run keeps a flag that was dropped or changed;
configure_build_dir starts it afresh whenever what the configure depended on differs."""

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROBE = """cmake_minimum_required(VERSION 3.14)
project(probe C)
file(WRITE ${CMAKE_BINARY_DIR}/value.txt "${PROBE_VALUE}")
"""


def _configure(src: Path, out: Path, *flags: str) -> str:
    script = f'src={src}; tag=test; source scripts/cmake-common.sh; configure_build_dir {out} label "$@"'
    done = subprocess.run(["bash", "-c", script, "configure", *flags], cwd=REPO, capture_output=True, text=True,
                          check=True)
    return done.stderr


def test_a_changed_or_dropped_flag_reaches_an_existing_build_dir(tmp_path):
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(PROBE)

    assert "reconfiguring" not in _configure(src, out, "-DPROBE_VALUE=1")
    assert (out / "value.txt").read_text() == "1"
    cache_time = (out / "CMakeCache.txt").stat().st_mtime_ns

    assert "reconfiguring" not in _configure(src, out, "-DPROBE_VALUE=1")
    assert (out / "CMakeCache.txt").stat().st_mtime_ns == cache_time  # same inputs: the cache is reused

    assert "reconfiguring" in _configure(src, out, "-DPROBE_VALUE=2")
    assert (out / "value.txt").read_text() == "2"

    assert "reconfiguring" in _configure(src, out)
    assert (out / "value.txt").read_text() == ""  # a dropped flag is gone, not kept by the old cache


def test_a_native_build_depends_on_the_cpu_flags_and_a_cross_build_does_not(tmp_path):
    (tmp_path / "CMakeLists.txt").write_text(PROBE)
    script = f'src={tmp_path}; tag=test; source scripts/cmake-common.sh; configure_inputs "$@"'

    def inputs(*flags):
        return subprocess.run(["bash", "-c", script, "inputs", *flags], cwd=REPO, capture_output=True, text=True,
                              check=True).stdout

    cpu_line = "cpu " + " ".join(sorted(Path("/proc/cpuinfo").read_text().split("flags", 1)[1]
                                        .split("\n", 1)[0].lstrip(" \t:").split()))
    assert cpu_line in inputs("-DGGML_NATIVE=ON")
    assert "\ncpu " not in inputs("-DGGML_NATIVE=OFF")
