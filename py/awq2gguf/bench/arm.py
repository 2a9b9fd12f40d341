"""`bench arm`: guest instruction counts of the ARM builds' Q4_0 matmuls under qemu-aarch64.

There is no ARM hardware here, so speed is estimated by a proxy: the number of guest
instructions QEMU executes for a fixed matmul, counted by a TCG plugin (native/qemu_insn_count.c) in a
single-threaded run. The counts are deterministic (the same binary and shapes give the same
count), but they are not time: they ignore memory bandwidth, latencies and how many of each
instruction a core issues per cycle.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from ..assets.synthetic import SHAPES as MODEL_SHAPES
from ..builds import get_build
from ..errors import tool_failure
from ..paths import BUILD_DIR, ROOT
from ..processes import run
from . import BenchError

ARM_RUN = ROOT / "scripts" / "arm-run.sh"
PROXY_NOTE = ("guest instructions counted by QEMU: a deterministic proxy for work done, not a measurement of time "
              "(no bandwidth, latency or issue width)")


@dataclass(frozen=True)
class Shape:
    name: str
    k: int  # input features (the weight's row length)
    n: int  # output features
    m: int  # activation rows: 1 = decode (GEMV), more = prefill (GEMM)


# Qwen2.5-0.5B's matmuls, at decode and at a prefill batch; 64 rows keep the emulated GEMM short
# and exercise the same kernel as 512.
_QWEN05 = MODEL_SHAPES["qwen2.5-0.5b"]
_E, _KV, _FF = _QWEN05.n_embd, _QWEN05.n_head_kv * _QWEN05.head_dim, _QWEN05.n_ff
QWEN05_LAYER = [("attn_q", _E, _E), ("attn_k", _E, _KV), ("attn_v", _E, _KV), ("attn_output", _E, _E),
                ("ffn_gate", _E, _FF), ("ffn_up", _E, _FF), ("ffn_down", _FF, _E)]
SHAPES = [Shape(f"{name} decode", k, n, 1) for name, k, n in QWEN05_LAYER] + \
         [Shape(f"{name} prefill x64", k, n, 64) for name, k, n in QWEN05_LAYER if name in ("ffn_up", "ffn_down")]


class ArmTarget(NamedTuple):
    variant: str  # the cross-built tree (scripts/build-arm.sh): sve (i8mm, dotprod) or a64fx
    target: str   # what scripts/arm-run.sh runs it as: an SVE length in bits, or a64fx


# The one list of ARM targets, for the tests and `bench arm`: the sve tree at every SVE length
# QEMU takes up to 1024 bits, and the a64fx tree on QEMU's A64FX model.
TARGETS = [ArmTarget("sve", "128"), ArmTarget("sve", "256"), ArmTarget("sve", "512"), ArmTarget("sve", "1024"),
           ArmTarget("a64fx", "a64fx")]


def bin_dir(build: str, variant: str) -> Path:
    """Where scripts/build-arm.sh puts the programs of one cross-built tree."""
    return BUILD_DIR / f"arm-{variant}-{build}" / "bin"


def workload(build: str, variant: str) -> Path:
    exe = bin_dir(build, variant) / "mul_mat_q4_0"
    if not exe.is_file():
        raise BenchError(f"{exe} is missing: run `make arm-build`")
    return exe


def count(exe: Path, target: str, shape: Shape, reps: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "count.txt"
        plugin = get_build("patched").tool("libqemu_insn_count.so")  # a host program: built with the x86 tree
        env = dict(os.environ, ARM_INSN_COUNT=str(out), ARM_INSN_PLUGIN=str(plugin))
        proc = run([str(ARM_RUN), target, str(exe), str(shape.k), str(shape.n), str(shape.m), str(reps)], env,
                   timeout=3600)
        if proc.returncode != 0 or not out.is_file():
            raise tool_failure(f"{exe} {shape} at {target}", proc.returncode, proc.stderr, BenchError)
        return int(out.read_text().split()[-1])


def matmul_insns(build: str, variant: str, target: str, shape: Shape) -> int:
    """Guest instructions of one matmul: runs with 1 and 3 repetitions differ by exactly two."""
    exe = workload(build, variant)
    return (count(exe, target, shape, 3) - count(exe, target, shape, 1)) // 2
