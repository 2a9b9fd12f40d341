"""One speed run of one build, with the child's own peak RSS, by one of two runners:
the built llama-bench binary, or llama-cpp-python loading the build's libllama.so."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ..builds import Build
from ..errors import tool_failure
from . import BenchError
from .peak_rss import run_with_peak_rss


@dataclass(frozen=True)
class Run:
    tokens_per_s: float
    peak_rss_bytes: int



def parse_llama_bench_json(text: str) -> float:
    """tokens/s of the single test in `llama-bench -o json` output."""
    try:
        results = json.loads(text)
    except json.JSONDecodeError as e:
        raise BenchError(f"llama-bench printed no JSON: {text[:200]!r}") from e
    if len(results) != 1:
        raise BenchError(f"expected one llama-bench result, got {len(results)}")
    return float(results[0]["avg_ts"])


def measured(build: Build, cmd: list[str], what: str, model: Path) -> tuple[subprocess.CompletedProcess, int]:
    """(the finished process, its peak RSS) of cmd run with the build's libraries; a failure names
    build and model."""
    proc, peak_rss = run_with_peak_rss(cmd, env=build.env())
    if proc.returncode != 0:
        raise tool_failure(f"{build.name} {what} on {model}", proc.returncode, proc.stderr, BenchError)
    return proc, peak_rss


def run_llama_bench(build: Build, model: Path, threads: int, n_prompt: int, n_gen: int,
                    rpc: tuple[str, ...] = ()) -> Run:
    """`llama-bench -r 1` (after its own warm-up run) for one pp or tg test, in the build's mode; with
    rpc, the layers split over those ggml-rpc-servers."""
    cmd = [str(build.tool("llama-bench")), *build.mode_args("llama-bench"), "-m", str(model), "-t", str(threads),
           "-p", str(n_prompt), "-n", str(n_gen), "-r", "1", "-o", "json",
           *(["--rpc", ",".join(rpc)] if rpc else [])]
    proc, peak_rss = measured(build, cmd, "llama-bench", model)
    return Run(parse_llama_bench_json(proc.stdout), peak_rss)


def run_llama_cpp_python(build: Build, model: Path, threads: int, n_prompt: int, n_gen: int) -> Run:
    cmd = [sys.executable, "-m", "awq2gguf.bench.py_runner", str(model), str(threads), str(n_prompt), str(n_gen)]
    proc, peak_rss = measured(build, cmd, "llama-cpp-python run", model)
    return Run(json.loads(proc.stdout.strip().splitlines()[-1])["tokens_per_s"], peak_rss)


RUNNERS = {"binary": run_llama_bench, "python": run_llama_cpp_python}
