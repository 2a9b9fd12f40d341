"""One run of a build's llama-batched-bench: several streams decoding at once, as a server's slots do."""

from __future__ import annotations

import re
from pathlib import Path

from ..builds import Build
from . import BenchError
from .llama_bench import Run, measured

# A result row of its Markdown table: |PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | T s | S t/s|
_ROW = re.compile(r"^\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*(\d+)\s*\|\s*[\d.]+\s*\|\s*[\d.]+\s*\|\s*[\d.]+\s*\|"
                  r"\s*([\d.]+)\s*\|", re.M)


def parse_decode_tps(text: str, streams: int) -> float:
    """Generation tokens/s summed over the streams (S_TG) of the row with `streams` streams."""
    rows = {int(m[3]): float(m[5]) for m in _ROW.finditer(text)}
    if streams not in rows:
        raise BenchError(f"llama-batched-bench printed no row for {streams} streams: {text[-300:]!r}")
    return rows[streams]


def run_batched_bench(build: Build, model: Path, threads: int, n_prompt: int, n_gen: int, streams: int) -> Run:
    """`llama-batched-bench` with `streams` sequences of n_prompt prompt tokens each, then n_gen decode
    steps of one token per stream, in the build's mode."""
    ctx = streams * (n_prompt + n_gen) + 64  # every stream's tokens, and the tool's 16-token warm-up
    cmd = [str(build.tool("llama-batched-bench")), *build.mode_args("llama-batched-bench"), "-m", str(model),
           "-t", str(threads), "-c", str(ctx), "-npp", str(n_prompt), "-ntg", str(n_gen), "-npl", str(streams)]
    proc, peak_rss = measured(build, cmd, "llama-batched-bench", model)
    return Run(parse_decode_tps(proc.stdout + proc.stderr, streams), peak_rss)
