"""The llama.cpp builds made by `make stock-build` and `make patched-build`, found by name."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .paths import BUILD_DIR
from .proc_io import Awq2ggufError, ToolFailed, run_tool

BUILD_NAMES = ("stock", "patched")


class BuildMissing(Awq2ggufError):
    pass


@dataclass(frozen=True)
class Build:
    name: str
    bin_dir: Path

    def tool(self, tool: str) -> Path:
        path = self.bin_dir / tool
        if not path.is_file():
            raise BuildMissing(f"{path} is missing from the {self.name} build: run `make {self.name}-build`")
        return path

    @property
    def lib_dir(self) -> Path:
        """Directory holding libllama.so and libggml*.so (CMake puts them beside the binaries)."""
        return self.bin_dir

    def run(self, tool: str, args: list[str], error: type[Awq2ggufError] = ToolFailed) -> subprocess.CompletedProcess:
        """Run one of the build's tools with its libraries; a failure names build and tool."""
        return run_tool([str(self.tool(tool)), *args], f"{self.name} {tool}", self.env(), error)

    def env(self) -> dict[str, str]:
        """Environment for a child that must use this build's libraries (tools or llama-cpp-python)."""
        env = dict(os.environ)
        env["LLAMA_CPP_LIB_PATH"] = str(self.lib_dir)
        env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(self.lib_dir), env.get("LD_LIBRARY_PATH")]))
        return env


def get_build(name: str) -> Build:
    if name not in BUILD_NAMES:
        raise ValueError(f"unknown build {name!r}: choose from {', '.join(BUILD_NAMES)}")
    build = Build(name, BUILD_DIR / name / "bin")
    if not (build.lib_dir / "libllama.so").is_file():
        raise BuildMissing(f"the {name} build is missing ({build.lib_dir}/libllama.so not found): "
                           f"run `make {name}-build`")
    return build
