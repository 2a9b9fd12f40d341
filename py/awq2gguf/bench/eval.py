"""`bench eval`: perplexity, KL-divergence to a base model and multiple-choice accuracy."""

from __future__ import annotations

import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from ..builds import Build
from ..processes import stream_tool
from . import BenchError
from .mc_score import choose
from .tasks import TASKS, Item, Task


def mc_accuracy(task: Task, scored: list[dict], golds: list[int]) -> dict:
    """Accuracy (raw and length-normalised) and the task's reported metric with its std. error."""
    n = len(scored)
    hits = {
        norm: sum(choose(s["logprobs"], s["n_bytes"], norm) == g for s, g in zip(scored, golds))
        for norm in (False, True)
    }
    acc, acc_norm = hits[False] / n, hits[True] / n
    metric = acc_norm if task.normalised else acc
    return {"n": n, "acc": acc, "acc_norm": acc_norm, "metric": task.metric,
            "score": metric, "stderr": math.sqrt(metric * (1 - metric) / n)}


def run_mc_task(build: Build, model: Path, task: Task, items: list[Item], threads: int,
                on_item: Callable[[], None] = lambda: None) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump([item.pairs for item in items], f)
        f.flush()
        scored = []

        def take(line: str) -> None:
            scored.append(json.loads(line))
            on_item()
        what = f"scoring {task.name} with {model.name} on {build.name}"
        stream_tool([sys.executable, "-m", "awq2gguf.bench.mc_score", str(model), f.name, str(threads)], what, take,
                    build.env(), BenchError)
    if len(scored) != len(items):
        raise BenchError(f"{what} gave {len(scored)} scores for {len(items)} items")
    return mc_accuracy(task, scored, [item.gold for item in items])


def evaluate_model(build: Build, model: Path, text_metrics: Callable[[Path], dict], items: dict[str, list[Item]],
                   threads: int, on_item: Callable[[], None] = lambda: None) -> dict:
    """One row of the accuracy table: size, `text_metrics` (perplexity, KLD), MC task scores."""
    start = time.monotonic()
    row = {"model": str(model), "size_mib": model.stat().st_size / 2**20}
    row.update(text_metrics(model))
    row["tasks"] = {name: run_mc_task(build, model, TASKS[name], task_items, threads, on_item)
                    for name, task_items in items.items()}
    if row["tasks"]:
        row["mc_average"] = sum(t["score"] for t in row["tasks"].values()) / len(row["tasks"])
    row["wall_s"] = time.monotonic() - start
    return row
