"""What the benchmark host offers, and whether it is quiet enough to measure on."""

from __future__ import annotations

import psutil

from ..host import physical_cores

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
