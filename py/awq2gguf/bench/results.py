"""Saved bench results: every command writes its JSON report under bench/results/raw/."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from ..paths import ROOT
from ..atomic import atomic_path
from .reports import Report, from_json

RESULTS_DIR = Path(os.environ.get("AWQ2GGUF_RESULTS", ROOT / "bench" / "results"))


def save(report: Report) -> Path:
    raw = RESULTS_DIR / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    path = raw / f"{report.kind}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(report.to_json(), indent=2) + "\n")
    return path


def load(path: Path) -> Report:
    return from_json(json.loads(path.read_text()))


def latest_each(kind: str) -> list[Report]:
    """The latest report of this kind for each development model it was run on (one for kinds
    that are not about one), in the order the models were first measured."""
    latest = {}
    for path in sorted((RESULTS_DIR / "raw").glob(f"{kind}-*.json")):
        report = load(path)
        if report.kind == kind:  # "awq-*" files are another kind
            latest[getattr(report, "model", None) or getattr(report, "dev_model", None)] = report
    return list(latest.values())
