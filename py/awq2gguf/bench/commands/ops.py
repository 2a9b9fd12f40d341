"""`bench ops`: per-op timings (test-backend-ops perf) at the model's own graph shapes."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import click

from ...assets.synthetic import DEFAULT_SHAPE, SHAPES
from ...builds import get_build
from .. import ops as ops_mod
from ..cli_shared import BUILDS, JSON, check_machine, finish, log, progress
from ...host import physical_cores
from ..models import quantized_by, synthetic_f16
from ..reports import Report, report_kinds
from ..tables import Table


@dataclass(kw_only=True)
class OpCase:
    """One op case (test-backend-ops' name): microseconds per run and the ratio to the first build, by build."""
    case: str
    us: dict[str, float]
    ratio: dict[str, float]


@report_kinds("ops")
@dataclass(kw_only=True)
class OpsReport(Report):
    shape: str
    qtype: str
    reps: int
    builds: list[str]
    cases: list[OpCase]
    ROWS = {"cases": OpCase}

    def table(self) -> Table:
        builds = self.builds
        title = (f"ops at the {self.shape} ({self.qtype}) graph shapes: us/run, median of "
                 f"{self.reps} interleaved reps")
        headers = ["op", *[f"{b} us" for b in builds], *[f"{b}/{builds[0]}" for b in builds[1:]]]
        rows = [[ops_mod.short_case(c.case), *[f"{c.us[b]:.2f}" for b in builds],
                 *[f"{c.ratio[b]:.3f}" for b in builds[1:]]] for c in self.cases]
        return Table(title, headers, rows)


@click.command()
@click.option("--op", "op_names", multiple=True, type=click.Choice(["ROPE", "MUL_MAT"], case_sensitive=False),
              default=["ROPE", "MUL_MAT"], show_default=True, help="ggml op(s) to time; repeat for several.")
@click.option("--shape", type=click.Choice(sorted(SHAPES)), default=DEFAULT_SHAPE, show_default=True,
              help="Model whose graph gives the op shapes.")
@click.option("--qtype", default="Q4_0", show_default=True, help="Weight type of the model's matmuls.")
@BUILDS
@click.option("--reps", type=click.IntRange(min=1), default=2, show_default=True, help="Interleaved repetitions.")
@JSON
def ops(op_names, shape, qtype, build_names, reps, as_json):
    """Per-op timings (test-backend-ops perf) at the model's own shapes, as A/B ratios.

    The op list is exported from the model's compute graph at prefill (512 tokens) and decode
    (1 token) by test-export-graph-ops, so the shapes are exactly the model's.
    """
    busy = check_machine(physical_cores())
    builds = [get_build(n) for n in build_names]
    model = quantized_by(builds[0], synthetic_f16(shape, log), qtype, log)
    with tempfile.TemporaryDirectory() as tmp:
        cases = ops_mod.export_cases(builds[0], model, [o.upper() for o in op_names], Path(tmp))
        with progress("op timings", reps * len(builds)) as advance:
            timings = ops_mod.run_interleaved(builds, cases, reps, on_run=advance)
    report = OpsReport(kind="ops", shape=shape, qtype=qtype, reps=reps, busy_warning=busy,
                       builds=[b.name for b in builds], cases=ops_mod.summarise(timings, builds[0].name))
    finish(report, as_json)
