"""The llama.cpp builds found by name: the toolkit's own (`make stock-build`, `make patched-build`)
and the peer ik_llama.cpp (`make ik-build IK_SRC=DIR`), which bench runs in each of its modes."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .paths import BUILD_DIR
from .errors import Awq2ggufError, ToolFailed
from .processes import run_tool

BUILD_NAMES = ("stock", "patched")
# The peer's modes: bench name -> whether its run-time repack is on, which makes every Q4_0 weight its
# row-interleaved Q4_0_R8 at load (and reads the file without mmap).
PEER_DIR = "ik"
PEER_MODES = {"ik": False, "ik-rtr": True}
BENCH_BUILD_NAMES = BUILD_NAMES + tuple(PEER_MODES)


class BuildMissing(Awq2ggufError):
    pass


@dataclass(frozen=True)
class Build:
    name: str
    bin_dir: Path
    repack_at_load: bool = False  # the peer's -rtr

    @property
    def is_peer(self) -> bool:
        return self.name in PEER_MODES

    def mode_args(self, tool: str) -> tuple[str, ...]:
        """What every run of a model by this tool passes for the build's mode: llama-bench takes the
        peer's run-time repack as `-rtr 1`, its other tools as a flag."""
        if not self.repack_at_load:
            return ()
        return ("-rtr", "1") if tool == "llama-bench" else ("-rtr",)

    def tool(self, tool: str) -> Path:
        path = self.bin_dir / tool
        if not path.is_file():
            raise BuildMissing(f"{path} is missing from the {self.name} build: run `{_make_target(self.name)}`")
        return path

    @property
    def lib_dir(self) -> Path:
        """Directory holding libllama.so and libggml*.so (CMake puts them beside the binaries)."""
        return self.bin_dir

    def run(self, tool: str, args: list[str], error: type[Awq2ggufError] = ToolFailed) -> subprocess.CompletedProcess:
        """Run one of the build's tools with its libraries, in the build's mode; a failure names build and tool."""
        return run_tool([str(self.tool(tool)), *self.mode_args(tool), *args], f"{self.name} {tool}", self.env(), error)

    def env(self) -> dict[str, str]:
        """Environment for a child that must use this build's libraries (tools or llama-cpp-python)."""
        env = dict(os.environ)
        env["LLAMA_CPP_LIB_PATH"] = str(self.lib_dir)
        env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(self.lib_dir), env.get("LD_LIBRARY_PATH")]))
        return env


def _make_target(name: str) -> str:
    return "make ik-build IK_SRC=DIR" if name in PEER_MODES else f"make {name}-build"


def get_build(name: str) -> Build:
    if name not in BENCH_BUILD_NAMES:
        raise ValueError(f"unknown build {name!r}: choose from {', '.join(BENCH_BUILD_NAMES)}")
    peer = name in PEER_MODES
    build = Build(name, BUILD_DIR / (PEER_DIR if peer else name) / "bin", PEER_MODES.get(name, False))
    if not (build.lib_dir / "libllama.so").is_file():
        raise BuildMissing(f"the {name} build is missing ({build.lib_dir}/libllama.so not found): "
                           f"run `{_make_target(name)}`")
    return build
