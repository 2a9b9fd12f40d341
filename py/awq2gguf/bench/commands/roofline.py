"""`bench roofline`: decode as a fraction of the memory-bandwidth bound, prefill of the int8 peak."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

import click

from ...builds import get_build
from .. import roofline as roofline_mod
from ..cli_shared import JSON, MODEL_OPTIONS, THREADS, check_machine, finish, models_for, progress
from ..llama_bench import run_llama_bench
from ..reports import Report, report_kinds
from ..speed import run_interleaved
from ..tables import Table


@dataclass(kw_only=True)
class RooflineRow:
    """One build: the model's bytes and int8 ops per token, tokens/s and the fractions of their bounds."""
    build: str
    model: str
    bytes_per_token: float
    ops_per_token: float
    decode_tps: float
    decode_bound_tps: float
    decode_fraction: float
    prefill_tps: float
    prefill_bound_tps: float
    prefill_fraction: float
    kernels: str = "not recorded"  # the Q4_0 kernels the build ran (older reports do not say)


@report_kinds("roofline")
@dataclass(kw_only=True)
class RooflineReport(Report):
    threads: int
    reps: int
    bandwidth: dict  # STREAM read/copy/triad GB/s (medians over the decode repetitions; older reports: one run)
    int8_peak: dict  # gops, ops_per_cycle_per_core, ghz, cores, basis
    rows: list[RooflineRow]
    ROWS = {"rows": RooflineRow}

    def table(self) -> Table:
        bw, peak = self.bandwidth, self.int8_peak
        # Older reports have one STREAM run and do not say what pages it got.
        parts = []
        if "read_gbs_per_rep" in bw:
            per_rep = bw["read_gbs_per_rep"]
            parts.append(f"median of {len(per_rep)} runs, one before each decode repetition: "
                         f"{min(per_rep):.1f}-{max(per_rep):.1f}")
        parts.append(f"copy {bw['copy_gbs']:.1f}, triad {bw['triad_gbs']:.1f}")
        if "huge_page_kib" in bw:
            parts.append(f"{100 * bw['huge_page_kib'] / bw['array_kib']:.0f}% of its arrays on 2 MiB pages")
        title = (f"roofline, {self.threads} thread(s): STREAM read {bw['read_gbs']:.1f} GB/s ({'; '.join(parts)}); "
                 f"int8 peak {peak['gops']:.0f} GOPS "
                 f"({peak['ops_per_cycle_per_core']} ops/cycle x {peak['ghz']:.2f} GHz x {peak['cores']} cores: "
                 f"{peak['basis']})")
        headers = ["build", "kernels", "model", "MiB read / token", "decode t/s", "bandwidth bound t/s",
                   "decode fraction", "prefill t/s", "int8 bound t/s", "prefill fraction"]
        rows = [[r.build, r.kernels, Path(r.model).name, f"{r.bytes_per_token / 2**20:.1f}", f"{r.decode_tps:.1f}",
                 f"{r.decode_bound_tps:.1f}", f"{100 * r.decode_fraction:.0f}%", f"{r.prefill_tps:.1f}",
                 f"{r.prefill_bound_tps:.0f}", f"{100 * r.prefill_fraction:.0f}%"] for r in self.rows]
        return Table(title, headers, rows)


@click.command()
@THREADS
@MODEL_OPTIONS
@click.option("--reps", type=click.IntRange(min=1), default=3, show_default=True, help="Repetitions per build and test.")
@click.option("--int8-ops-per-cycle", type=click.IntRange(min=1), help="Override the detected int8 ops/cycle/core.")
@click.option("--ghz", type=click.FloatRange(min=0.1), help="Override the detected clock.")
@JSON
def roofline(threads, model, shape, qtype, build_names, reps, int8_ops_per_cycle, ghz, as_json):
    """Decode as a fraction of the memory-bandwidth bound, prefill of the int8 peak.

    Bandwidth is measured here with a STREAM-style kernel at the same thread count before each
    decode repetition; the decode bound is bandwidth (read kernel) / weight bytes read per token,
    and each repetition's fraction is taken against the bandwidth measured just before it.
    """
    busy = check_machine(threads)
    builds = [get_build(n) for n in build_names]
    models = models_for(builds, model, shape, qtype)
    peak = roofline_mod.int8_peak(threads, int8_ops_per_cycle, ghz)
    streams = []
    with progress("roofline runs (STREAM before each decode repetition)", 2 * reps * len(builds)) as advance:
        tg, _ = run_interleaved(run_llama_bench, builds, models, threads, 0, 128, reps, on_run=advance,
                                before_rep=lambda: streams.append(roofline_mod.measure_bandwidth(builds[0], threads)))
        pp, _ = run_interleaved(run_llama_bench, builds, models, threads, 512, 0, reps, on_run=advance)
    streams = streams[:len(tg[0].runs)]  # after Ctrl-C, a STREAM run may precede no completed repetition
    read_gbs = [s["read_gbs"] for s in streams]
    bandwidth = {key: statistics.median(s[key] for s in streams) for key in streams[0] if key != "check"}
    bandwidth["read_gbs_per_rep"] = read_gbs
    rows = []
    for b, t, p in zip(builds, tg, pp):
        tps_tg, tps_pp = t.summary()["tokens_per_s"]["median"], p.summary()["tokens_per_s"]["median"]
        rows.append({"build": b.name, "kernels": roofline_mod.kernel_isa(b), "model": str(models[b.name]),
                     "decode_tps": tps_tg, "prefill_tps": tps_pp,
                     **roofline_mod.fractions(models[b.name], read_gbs, peak, t.tps, tps_pp)})
    report = RooflineReport(kind="roofline", threads=threads, reps=reps, busy_warning=busy, bandwidth=bandwidth,
                            int8_peak={"gops": peak.gops, "ops_per_cycle_per_core": peak.ops_per_cycle_per_core,
                                       "ghz": peak.ghz, "cores": peak.cores, "basis": peak.basis},
                            rows=rows)
    finish(report, as_json)
