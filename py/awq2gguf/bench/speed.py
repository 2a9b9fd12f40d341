"""Interleaved A/B speed runs of several builds and their summary statistics."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..builds import Build
from .interleave import abba
from .llama_bench import Run


@dataclass
class BuildResult:
    build: str
    model: Path
    runs: list[Run] = field(default_factory=list)

    @property
    def tps(self) -> list[float]:
        return [r.tokens_per_s for r in self.runs]

    def summary(self) -> dict:
        tps = self.tps
        median = statistics.median(tps)
        return {
            "build": self.build,
            "model": str(self.model),
            "model_size_mib": self.model.stat().st_size / 2**20,
            "tokens_per_s": {"median": median, "min": min(tps), "max": max(tps), "samples": tps},
            "ms_per_128_tokens": 1000.0 * 128 / median,
            "peak_rss_mib": max(r.peak_rss_bytes for r in self.runs) / 2**20,
        }


def paired_ratios(a: BuildResult, b: BuildResult) -> dict:
    """a/b tokens/s per repetition (runs of one repetition were taken back to back)."""
    ratios = [x / y for x, y in zip(a.tps, b.tps)]
    return {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios), "samples": ratios}


def run_interleaved(runner: Callable[..., Run], builds: list[Build], models: dict[str, Path], threads: int,
                    n_prompt: int, n_gen: int, reps: int,
                    on_run: Callable[[], None] = lambda: None,
                    before_rep: Callable[[], None] = lambda: None) -> tuple[list[BuildResult], bool]:
    """Each repetition runs every build, in ABBA order (bench.interleave). Ctrl-C keeps the
    repetitions that completed for every build; returns (results, interrupted)."""
    results = {b.name: BuildResult(b.name, models[b.name]) for b in builds}
    interrupted = False
    try:
        for order in abba(builds, reps):
            before_rep()
            for build in order:
                results[build.name].runs.append(runner(build, models[build.name], threads, n_prompt, n_gen))
                on_run()
    except KeyboardInterrupt:
        complete = min(len(r.runs) for r in results.values())
        if complete == 0:
            raise
        for r in results.values():
            del r.runs[complete:]
        interrupted = True
    return [results[b.name] for b in builds], interrupted
