"""`bench prune`: the development model with blocks dropped by each method, made with awq2gguf
as a user would, and timed file against file.

The largest count is chosen by each method once; the smaller counts drop the first blocks of
that choice with --drop-block-list. That is the same choice --drop-blocks would make: SLEB's
greedy search and ShortGPT's ranking both choose N+1 blocks by adding one to their choice of N.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..builds import Build
from ..metadata import Key, provenance
from .awq import Made, awq2gguf
from .interleave import abba
from .llama_bench import RUNNERS


@dataclass(frozen=True)
class Pruned:
    method: str  # "none" for the unpruned file
    n: int
    made: Made
    blocks: list[int]  # in the unpruned model, in the order they were dropped
    calib_ppl: float  # calibration perplexity of the pruned FP model (as awq2gguf measured it)


def _dropped(path: Path) -> tuple[list[int], float | None]:
    """The blocks OUT dropped and the calibration perplexity after the last, from its metadata."""
    meta = dict(provenance(path))
    if Key.DROP_BLOCKS_BLOCKS not in meta:
        return [], None
    return ([int(b) for b in meta[Key.DROP_BLOCKS_BLOCKS].split(",")],
            float(meta[Key.DROP_BLOCKS_CALIB_PPL].split(",")[-1]))


def make_pruned(build: Build, model_dir: Path, out_dir: Path, args: list[str], counts: list[int],
                methods: list[str], log=print) -> list[Pruned]:
    """The unpruned awq2gguf file, then for each method one file per count in counts (besides 0)."""
    log("awq2gguf, no blocks dropped")
    made = [Pruned("none", 0, awq2gguf("no blocks dropped", model_dir, out_dir / "drop-0.gguf", args, build), [], None)]
    for method in methods:
        most, *fewer = sorted((n for n in counts if n), reverse=True)
        log(f"awq2gguf --drop-blocks {most} --drop-blocks-method {method}")
        first = awq2gguf(f"{method}, {most} blocks", model_dir, out_dir / f"drop-{most}-{method}.gguf",
                         args + ["--drop-blocks", str(most), "--drop-blocks-method", method], build)
        order, ppl = _dropped(first.path)
        files = [Pruned(method, most, first, order, ppl)]
        for n in fewer:
            log(f"awq2gguf --drop-block-list {','.join(map(str, order[:n]))} (the first {n} of {method}'s choice)")
            m = awq2gguf(f"{method}, {n} blocks", model_dir, out_dir / f"drop-{n}-{method}.gguf",
                         args + ["--drop-block-list", ",".join(map(str, order[:n]))], build)
            files.append(Pruned(method, n, m, *_dropped(m.path)))
        made += sorted(files, key=lambda p: p.n)
    return made


def interleaved_speed(build: Build, files: list[Path], threads: int, n_prompt: int, n_gen: int, reps: int,
                      on_run: Callable[[], None] = lambda: None) -> list[dict]:
    """tokens/s of each file with the build's llama-bench, the files in turn (reversed every other
    repetition), and each repetition's ratio to the first file's: median, min, max."""
    tps = [[] for _ in files]
    for order in abba(range(len(files)), reps):
        for i in order:
            tps[i].append(RUNNERS["binary"](build, files[i], threads, n_prompt, n_gen).tokens_per_s)
            on_run()
    out = []
    for t in tps:
        ratios = [a / b for a, b in zip(t, tps[0])]
        out.append({"median": statistics.median(t), "samples": t,
                    "ratio": {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}})
    return out
