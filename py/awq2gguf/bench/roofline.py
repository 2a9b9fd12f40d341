"""How close decode and prefill come to what this machine can do.

Decode reads every weight once per token, so its bound is memory bandwidth / bytes read per
token. Prefill is compute bound: its bound is the CPU's int8 dot-product peak / operations per
token. Bandwidth is measured with a STREAM-style kernel at the benchmark's thread count before
each decode repetition; the int8 peak comes from the CPU features and clock, with the per-cycle
figure stated so it can be checked.
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import statistics
from dataclasses import dataclass
from pathlib import Path

from ..builds import Build
from ..host import cpu_info, physical_cores
from ..processes import run_tool
from .gguf_tensors import TensorInfo, read_tensor_infos


def measure_bandwidth(build: Build, threads: int, n_elements: int = 1 << 25, reps: int = 10) -> dict:
    """Best-of-reps GB/s for read, copy and triad over 3 x 256 MiB arrays on transparent huge pages
    where the kernel grants them (huge_page_kib of array_kib), by the STREAM kernel (native/stream.c) the
    x86 build carries."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OMP_PROC_BIND="close")
    return json.loads(run_tool([str(build.tool("stream")), str(n_elements), str(reps)], "STREAM", env).stdout)


def decode_bytes_per_token(tensors: list[TensorInfo]) -> int:
    """Bytes of weights read to produce one token. With a separate output matrix, token_embd is
    only looked up (one row); when tied, token_embd is the output matrix and is read whole.
    The KV cache (under 1 MiB per token for 0.5B models at short context) is left out."""
    names = {t.name for t in tensors}
    total = 0
    for t in tensors:
        if t.name == "token_embd.weight" and "output.weight" in names:
            total += t.n_bytes // t.ne[1]
        else:
            total += t.n_bytes
    return total


def prefill_ops_per_token(tensors: list[TensorInfo]) -> int:
    """Multiply-adds x 2 of the weight matmuls per prompt token. The output matrix is left out:
    at prefill only the last token's logits are computed. Attention scores are also left out
    (about 3% at 512 tokens for 0.5B models)."""
    skip = {"token_embd.weight", "output.weight"}
    return sum(2 * t.n_elements for t in tensors if len(t.ne) >= 2 and t.ne[1] > 1 and t.name not in skip)


@dataclass(frozen=True)
class Int8Peak:
    ops_per_cycle_per_core: int
    ghz: float
    cores: int
    basis: str

    @property
    def gops(self) -> float:
        return self.ops_per_cycle_per_core * self.ghz * self.cores


def int8_ops_per_cycle(vendor: str, flags: set[str], arch: str, family: int = 0) -> tuple[int, str]:
    """Peak int8 multiply-add operations (x2) per cycle per core, and the reasoning behind it."""
    if arch in ("x86_64", "AMD64"):
        if "avx512_vnni" in flags:
            if vendor == "AuthenticAMD" and family >= 26:
                return 256, "AVX-512 VNNI on AMD Zen 5: two 512-bit VPDPBUSD (64 MACs each) per cycle"
            if vendor == "AuthenticAMD":
                return 128, "AVX-512 VNNI on AMD Zen 4: one 512-bit VPDPBUSD (64 MACs) per cycle"
            return 256, "AVX-512 VNNI: two 512-bit VPDPBUSD (64 MACs each) per cycle"
        if "avx_vnni" in flags:
            return 128, "AVX-VNNI: two 256-bit VPDPBUSD (32 MACs each) per cycle"
        if "avx2" in flags:
            return 64, "AVX2: VPMADDUBSW+VPMADDWD, about 32 MACs per cycle"
        return 16, "SSE: about 8 MACs per cycle"
    if arch in ("aarch64", "arm64"):
        if "i8mm" in flags:
            return 128, "Arm i8mm: two 128-bit SMMLA (32 MACs each) per cycle"
        if "asimddp" in flags:
            return 64, "Arm dotprod: two 128-bit SDOT (16 MACs each) per cycle"
        return 32, "NEON: about 16 MACs per cycle"
    return 16, f"unknown architecture {arch}: a conservative guess"


def int8_peak(threads: int, ops_per_cycle: int | None = None, ghz: float | None = None) -> Int8Peak:
    cpu = cpu_info()
    detected_ops, basis = int8_ops_per_cycle(cpu.vendor, cpu.flags, platform.machine(), cpu.family)
    if ops_per_cycle:
        basis = "given on the command line"
    return Int8Peak(ops_per_cycle or detected_ops, ghz or cpu.ghz, min(threads, physical_cores()), basis)


# The instruction set a build's Q4_0 matmul kernels were compiled for, best first, from ggml-cpu's
# compile-time feature functions (a build made with -march=native on another machine may differ
# from this CPU). The patched series has its own Q4_0 kernels for AVX2 (0006), SVE (0010) and AVX-512 (0012).
_KERNEL_ISAS = (("AVX-512 VNNI", ("ggml_cpu_has_avx512", "ggml_cpu_has_avx512_vnni")),
                ("AVX-512", ("ggml_cpu_has_avx512",)),
                ("AVX2", ("ggml_cpu_has_avx2",)),
                ("SVE", ("ggml_cpu_has_sve",)),
                ("NEON", ("ggml_cpu_has_neon",)))


def kernel_isa(build: Build) -> str:
    cpu_lib = build.lib_dir / "libggml-cpu.so"  # ik_llama.cpp keeps the CPU backend in libggml.so
    lib = ctypes.CDLL(str(cpu_lib if cpu_lib.is_file() else build.lib_dir / "libggml.so"))
    for name, functions in _KERNEL_ISAS:
        if all(getattr(lib, f)() for f in functions):
            return name
    return "scalar"


def fractions(model: Path, bandwidth_gbs: list[float], peak: Int8Peak, decode_tps: list[float],
              prefill_tps: float) -> dict:
    """Measured speed as a fraction of the bandwidth bound (decode) and the int8 bound (prefill).
    Decode repetition i is judged against bandwidth_gbs[i], measured just before it: a VM's
    bandwidth can move by half within minutes. Medians over the repetitions."""
    tensors = read_tensor_infos(model)
    bytes_per_token = decode_bytes_per_token(tensors)
    ops_per_token = prefill_ops_per_token(tensors)
    decode_bounds = [gbs * 1e9 / bytes_per_token for gbs in bandwidth_gbs]
    prefill_bound = peak.gops * 1e9 / ops_per_token
    return {
        "bytes_per_token": bytes_per_token,
        "decode_bound_tps": statistics.median(decode_bounds),
        "decode_fraction": statistics.median(t / bound for t, bound in zip(decode_tps, decode_bounds)),
        "ops_per_token": ops_per_token,
        "prefill_bound_tps": prefill_bound,
        "prefill_fraction": prefill_tps / prefill_bound,
    }
