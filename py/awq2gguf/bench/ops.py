"""Per-op timings with `test-backend-ops perf` at a model's own graph shapes.

test-export-graph-ops writes every distinct op of the model's compute graph (prefill and
decode batch sizes) to a file that test-backend-ops replays, so ROPE and MUL_MAT are timed at
exactly the shapes the model runs, not at upstream's generic perf shapes.
"""

from __future__ import annotations

import re
import statistics
from pathlib import Path
from typing import Callable

from ..builds import Build
from . import BenchError
from .interleave import abba

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_CASE = re.compile(r"^\s*(\w+\(.*\)):\s+(\d+) runs -\s+([\d.]+) us/run", re.M)


def parse_perf(out: str) -> dict[str, float]:
    """us/run per test case from test-backend-ops perf console output."""
    return {m[1]: float(m[3]) for m in _CASE.finditer(_ANSI.sub("", out))}


def export_cases(build: Build, model: Path, ops: list[str], tmp: Path) -> tuple[Path, list[str]]:
    """(test file with the model's distinct ops at 512-token prefill and 1-token decode, op filter)."""
    test_file = tmp / "ops.txt"
    build.run("test-export-graph-ops", ["-m", str(model), "-c", "512", "-b", "512", "-ub", "512",
                                              "-o", str(test_file)])
    return test_file, ops


def short_case(case: str) -> str:
    """'ROPE Qcur-0 [32,4,512,1] <- f32[32,4,512,1],i32[512,1,1,1]' from the full test case string."""
    m = re.match(r"(\w+)\(name=([^,]*),type=\w+,ne=(\[[^\]]*\]).*sources=(.*)\)$", case)
    return f"{m[1]} {m[2]} {m[3]} <- {m[4]}" if m else case


def run_once(build: Build, cases: tuple[Path, list[str]]) -> dict[str, float]:
    test_file, ops = cases
    timings = parse_perf(build.run("test-backend-ops", ["perf", "-b", "CPU", "--test-file", str(test_file),
                                                              "-o", ",".join(ops)]).stdout)
    if not timings:
        raise BenchError(f"test-backend-ops on {build.name} timed no {','.join(ops)} case")
    return timings


def run_interleaved(builds: list[Build], cases, reps: int,
                    on_run: Callable[[], None] = lambda: None) -> dict[str, list[dict[str, float]]]:
    runs: dict[str, list[dict[str, float]]] = {b.name: [] for b in builds}
    for order in abba(builds, reps):
        for build in order:
            runs[build.name].append(run_once(build, cases))
            on_run()
    return runs


def summarise(runs: dict[str, list[dict[str, float]]], base: str) -> list[dict]:
    """Median us/run per case and build, and the median per-rep ratio to `base`."""
    cases = [c for c in runs[base][0] if all(c in r for rs in runs.values() for r in rs)]
    return [{
        "case": case,
        "us": {b: statistics.median(r[case] for r in rs) for b, rs in runs.items()},
        "ratio": {b: statistics.median(r[case] / r0[case] for r, r0 in zip(rs, runs[base]))
                  for b, rs in runs.items() if b != base},
    } for case in cases]
