"""What the benchmark host offers, and whether it is quiet enough to measure on."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import psutil

from ..host import physical_cores

# The x86 SIMD extensions the Q4_0 kernels can use, named as in /proc/cpuinfo, best first.
_AVX512_PARTS = ("avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16")


@dataclass(frozen=True)
class CpuInfo:
    vendor: str
    model: str
    flags: frozenset[str]
    ghz: float

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

    def describe(self) -> str:
        return f"{self.model or self.vendor or 'unknown CPU'}, {physical_cores()} cores, {self.simd}"


def cpu_info() -> CpuInfo:
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    fields: dict[str, str] = {}
    mhz = 0.0
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "cpu MHz":
            mhz = max(mhz, float(value))
        elif key in ("vendor_id", "model name", "flags", "Features"):
            fields.setdefault(key, value.strip())
    max_freq = Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
    if max_freq.is_file():
        mhz = int(max_freq.read_text()) / 1000
    flags = fields.get("flags") or fields.get("Features", "")
    return CpuInfo(fields.get("vendor_id", ""), fields.get("model name", ""), frozenset(flags.split()), mhz / 1000)


def busy_warning(threads: int, sample_s: float = 1.0) -> str | None:
    """A warning when other work holds the cores the run needs: spin-waiting threads on an
    oversubscribed machine collapse throughput, so such a run says little about the code.
    Measures CPU use over `sample_s` now rather than the load average, which lags a minute."""
    cores = physical_cores()
    busy = psutil.cpu_percent(interval=sample_s) / 100 * (psutil.cpu_count() or cores)
    if busy > cores - threads + 0.5:
        return (f"machine is busy ({busy:.1f} of {cores} cores in use before the run) while {threads} "
                f"thread(s) are needed: timings may be unreliable")
    return None


def threads_warning(threads: int) -> str | None:
    if threads > physical_cores():
        return (f"--threads {threads} exceeds the {physical_cores()} physical core(s): "
                "threads will compete and tokens/s will drop")
    return None
