"""`bench arm`: guest instruction counts of the ARM builds' Q4_0 matmuls under qemu-aarch64."""

from __future__ import annotations

from dataclasses import dataclass

import click

from .. import arm as arm_mod
from ..cli_shared import JSON, finish, progress
from ..reports import Report, report_kinds
from ..tables import Table


@dataclass(kw_only=True)
class ArmRow:
    """One target and matmul shape: each build's guest instructions and their ratio."""
    target: str
    shape: str
    k: int
    n: int
    m: int
    stock: int
    patched: int
    ratio: float


@report_kinds("arm")
@dataclass(kw_only=True)
class ArmReport(Report):
    note: str  # what the counts are and are not
    rows: list[ArmRow]
    ROWS = {"rows": ArmRow}

    def table(self) -> Table:
        title = f"ARM Q4_0 matmuls under qemu-aarch64, patched/stock: {self.note}"
        headers = ["target", "shape (K x N, rows)", "stock insns", "patched insns", "patched/stock"]
        rows = [[r.target, f"{r.shape} ({r.k} x {r.n}, {r.m})", f"{r.stock:,}", f"{r.patched:,}", f"{r.ratio:.3f}"]
                for r in self.rows]
        return Table(title, headers, rows)


@click.command()
@click.option("--target", "targets", multiple=True, type=click.Choice([t.target for t in arm_mod.TARGETS]),
              help="SVE length in bits, or a64fx; repeat for several. Default: all.")
@click.option("--shape", "shape_names", multiple=True, type=click.Choice([s.name for s in arm_mod.SHAPES]),
              help="Matmul shape; repeat for several. Default: all.")
@JSON
def arm(targets, shape_names, as_json):
    """Guest instruction counts of the Q4_0 matmuls of the cross-built ARM trees (`make arm-build`)
    under qemu-aarch64, patched/stock per SVE length and shape (Qwen2.5-0.5B's, at decode and at
    prefill). A deterministic proxy for work done, not time."""
    runs = [t for t in arm_mod.TARGETS if not targets or t.target in targets]
    shapes = [s for s in arm_mod.SHAPES if not shape_names or s.name in shape_names]
    rows = []
    with progress("counting guest instructions under QEMU", len(runs) * len(shapes)) as advance:
        for variant, target in runs:
            for shape in shapes:
                counts = {b: arm_mod.matmul_insns(b, variant, target, shape) for b in ("stock", "patched")}
                rows.append({"target": target, "shape": shape.name, "k": shape.k, "n": shape.n, "m": shape.m,
                             **counts, "ratio": counts["patched"] / counts["stock"]})
                advance()
    finish(ArmReport(kind="arm", note=arm_mod.PROXY_NOTE, rows=rows), as_json)
