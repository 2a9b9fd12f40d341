"""What this machine offers the toolkit: its CPU (cores, SIMD, bf16), and memory."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import psutil

from .modes import Precision


def physical_cores() -> int:
    return psutil.cpu_count(logical=False) or os.cpu_count() or 1


def available_memory() -> int:
    """Bytes a new allocation can take without swapping (the kernel's MemAvailable)."""
    return psutil.virtual_memory().available


# The x86 SIMD extensions the Q4_0 kernels can use, named as in /proc/cpuinfo, best first.
_AVX512_PARTS = ("avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16")


@dataclass(frozen=True)
class CpuInfo:
    vendor: str
    model: str
    flags: frozenset[str]
    ghz: float
    family: int = 0  # cpuid's family on x86 (AMD: 25 Zen 3 and Zen 4, 26 Zen 5), 0 where none is given

    @property
    def simd(self) -> str:
        """The SIMD level reports name beside every figure: e.g. 'AVX-512 F/BW/VL/VNNI/BF16' or
        'AVX2, no AVX-512' (machines of this project differ in exactly this)."""
        avx512 = [p.removeprefix("avx512").lstrip("_").upper() for p in _AVX512_PARTS if p in self.flags]
        if avx512:
            return "AVX-512 " + "/".join(avx512)
        if "avx2" in self.flags:
            return "AVX2" + (" + AVX-VNNI" if "avx_vnni" in self.flags else "") + ", no AVX-512"
        return ", ".join(sorted(f for f in self.flags if f in ("asimd", "asimddp", "i8mm", "sve", "sve2"))) or "no AVX2"

    @property
    def fast_bf16(self) -> bool:
        """bf16 matrix products in hardware (AVX-512 BF16 or AMX on x86, the BF16 extension on Arm):
        there torch's bf16 matmul runs about twice the FP32 speed; elsewhere it is emulated, slower."""
        return bool(self.flags & {"avx512_bf16", "amx_bf16", "bf16"})

    def describe(self) -> str:
        # An AMD model name ("AMD EPYC" in a VM) does not tell Zen 4 from Zen 5; the family does.
        family = f" (family {self.family})" if self.vendor == "AuthenticAMD" and self.family else ""
        return f"{self.model or self.vendor or 'unknown CPU'}{family}, {physical_cores()} cores, {self.simd}"


def resolve_precision(precision: Precision) -> Precision:
    """The precision a job's products run in on this machine: fp32 or bf16."""
    if precision == Precision.AUTO:
        return Precision.BF16 if cpu_info().fast_bf16 else Precision.FP32
    return precision


def cpu_info() -> CpuInfo:
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    fields: dict[str, str] = {}
    mhz = 0.0
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "cpu MHz":
            mhz = max(mhz, float(value))
        elif key in ("vendor_id", "model name", "flags", "Features", "cpu family"):
            fields.setdefault(key, value.strip())
    max_freq = Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
    if max_freq.is_file():
        mhz = int(max_freq.read_text()) / 1000
    flags = fields.get("flags") or fields.get("Features", "")
    family = fields.get("cpu family", "0")
    return CpuInfo(fields.get("vendor_id", ""), fields.get("model name", ""), frozenset(flags.split()), mhz / 1000,
                   int(family) if family.isdigit() else 0)
