"""Reports as tables: one builder per report kind, rendered for the terminal (rich) or Markdown."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table as RichTable

from .ops import short_case


@dataclass
class Table:
    title: str
    headers: list[str]
    rows: list[list[str]]


def _spread(d: dict, fmt: str) -> str:
    return f"{d['median']:{fmt}} ({d['min']:{fmt}}-{d['max']:{fmt}})"


def speed_table(report: dict) -> Table:
    decode = report["kind"] == "decode"
    test = f"tg{report['n_gen']}" if decode else f"pp{report['n_prompt']}"
    base = report["builds"][0]["build"]
    title = (f"{report['kind']} ({test}, {report['runner']}): {report['threads']} thread(s), "
             f"{report['reps']} interleaved reps, median (min-max)")
    headers = ["build", "model", "size MiB", "tokens/s", *(["ms / 128 tok"] if decode else []),
               "peak RSS MiB", f"vs {base}"]
    rows = []
    for b in report["builds"]:
        ratio = report["ratios"].get(b["build"])
        rows.append([b["build"], Path(b["model"]).name, f"{b['model_size_mib']:.1f}",
                     _spread(b["tokens_per_s"], ".2f"),
                     *([f"{b['ms_per_128_tokens']:.0f}"] if decode else []),
                     f"{b['peak_rss_mib']:.0f}", _spread(ratio, ".3f") if ratio else "1"])
    return Table(title, headers, rows)


def eval_table(report: dict) -> Table:
    task_names = list(report["tasks"])
    has_kld = report.get("base") is not None
    title = (f"accuracy on the {report['build']} build: perplexity over {report['chunks']} x {report['ctx']} tokens"
             + (f", KLD vs {Path(report['base']).name}" if has_kld else "")
             + (f", first {report['limit']} items per task" if report.get("limit") else ""))
    headers = ["model", "size MiB", "PPL", *(["KLD", "same top %"] if has_kld else []),
               *[f"{t} ({report['tasks'][t]})" for t in task_names], "MC avg", "wall s"]
    rows = []
    for r in report["rows"]:
        tasks = r.get("tasks", {})
        rows.append([
            Path(r["model"]).name, f"{r['size_mib']:.1f}", f"{r['ppl']:.3f}",
            *([f"{r['kld']:.4f}", f"{r['same_top_p']:.2f}"] if has_kld else []),
            *[f"{100 * tasks[t]['score']:.1f}" if t in tasks else "-" for t in task_names],
            f"{100 * r['mc_average']:.1f}" if "mc_average" in r else "-",
            f"{r['wall_s']:.0f}",
        ])
    return Table(title, headers, rows)


def awq_table(report: dict) -> Table:
    title = (f"all-Q4_0 {report['model']} on the {report['build']} build: perplexity over {report['chunks']} x "
             f"{report['ctx']} tokens (FP16: {report['fp16_ppl']:.3f}), KLD vs FP16; calibration "
             f"{report['calib_samples']} x {report['calib_tokens']} tokens")
    headers = ["method", "size MiB", "PPL", "KLD", "same top %", "PPL gap closed %", "make s", "peak RSS MiB"]
    opt = lambda v, fmt: "-" if v is None else format(v, fmt)
    rows = [[r["model"], f"{r['size_mib']:.1f}", f"{r['ppl']:.3f}", f"{r['kld']:.4f}", f"{r['same_top_p']:.2f}",
             f"{100 * r['gap_closed']:.0f}", opt(r["make_s"], ".0f"), opt(r["peak_rss_mib"], ".0f")]
            for r in report["rows"]]
    return Table(title, headers, rows)


def awq_cost_table(report: dict) -> Table:
    title = (f"awq2gguf defaults on a random-weight {report['shape']} ({report['checkpoint_mib']:.0f} MiB checkpoint), "
             f"{report['threads']} thread(s), self-sampled {report['calib_samples']} x {report['calib_tokens']} tokens")
    headers = ["wall time", "peak RSS MiB", "peak disk MiB (work files + output)", "output MiB"]
    minutes, seconds = divmod(round(report["seconds"]), 60)
    disk = report.get("peak_disk_mib")  # reports before streaming did not measure it
    return Table(title, headers, [[f"{minutes:.0f} min {seconds:02.0f} s", f"{report['peak_rss_mib']:.0f}",
                                   "-" if disk is None else f"{disk:.0f}", f"{report['out_mib']:.1f}"]])


def arm_table(report: dict) -> Table:
    title = f"ARM Q4_0 matmuls under qemu-aarch64, patched/stock: {report['note']}"
    headers = ["target", "shape (K x N, rows)", "stock insns", "patched insns", "patched/stock"]
    rows = [[r["target"], f"{r['shape']} ({r['k']} x {r['n']}, {r['m']})", f"{r['stock']:,}", f"{r['patched']:,}",
             f"{r['ratio']:.3f}"] for r in report["rows"]]
    return Table(title, headers, rows)


def serve_table(report: dict) -> Table:
    base = report["rows"][0]["build"]
    title = (f"awq2gguf-serve, {Path(report['model']).name}: streamed completions of ~{report['prompt_words']} words "
             f"+ {report['n_gen']} tokens, {report['requests_per_client']} per client, {report['threads']} thread(s), "
             f"{report['reps']} interleaved reps, median (min-max)")
    headers = ["build", "clients", "requests", "requests/s", "first token ms (median)", "first token ms (max)",
               f"requests/s vs {base}"]
    rows = [[r["build"], str(r["clients"]), str(r["requests"]), f"{r['requests_per_s']:.3f}",
             f"{r['ttft_ms_median']:.0f}", f"{r['ttft_ms_max']:.0f}",
             "1" if r["build"] == base else _spread(r["ratio"], ".3f")] for r in report["rows"]]
    return Table(title, headers, rows)


def print_rich(table: Table) -> None:
    out = Console()
    if not out.is_terminal:
        out.width = 160  # keep tables whole when piped or captured
    t = RichTable(title=table.title)
    for i, h in enumerate(table.headers):
        t.add_column(h, justify="left" if i < 2 else "right")
    for row in table.rows:
        t.add_row(*row)
    out.print(t)


def on_host(table: Table, report: dict) -> Table:
    """The table with the CPU it was measured on in its title (reports saved before hosts were
    recorded have none)."""
    host = report.get("host")
    return Table(f"{table.title} [{host}]", table.headers, table.rows) if host else table


def markdown(table: Table) -> str:
    lines = [f"**{table.title}**", "", "| " + " | ".join(table.headers) + " |",
             "| " + " | ".join("---" for _ in table.headers) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in table.rows]
    return "\n".join(lines) + "\n"


def roofline_table(report: dict) -> Table:
    bw, peak = report["bandwidth"], report["int8_peak"]
    title = (f"roofline, {report['threads']} thread(s): STREAM read {bw['read_gbs']:.1f} GB/s "
             f"(copy {bw['copy_gbs']:.1f}, triad {bw['triad_gbs']:.1f}); int8 peak {peak['gops']:.0f} GOPS "
             f"({peak['ops_per_cycle_per_core']} ops/cycle x {peak['ghz']:.2f} GHz x {peak['cores']} cores: "
             f"{peak['basis']})")
    headers = ["build", "kernels", "model", "MiB read / token", "decode t/s", "bandwidth bound t/s",
               "decode fraction", "prefill t/s", "int8 bound t/s", "prefill fraction"]
    rows = [[r["build"], r.get("kernels", "not recorded"), Path(r["model"]).name, f"{r['bytes_per_token'] / 2**20:.1f}", f"{r['decode_tps']:.1f}",
             f"{r['decode_bound_tps']:.1f}", f"{100 * r['decode_fraction']:.0f}%", f"{r['prefill_tps']:.1f}",
             f"{r['prefill_bound_tps']:.0f}", f"{100 * r['prefill_fraction']:.0f}%"] for r in report["rows"]]
    return Table(title, headers, rows)


def ops_table(report: dict) -> Table:
    builds = report["builds"]
    title = (f"ops at the {report['shape']} ({report['qtype']}) graph shapes: us/run, median of "
             f"{report['reps']} interleaved reps")
    headers = ["op", *[f"{b} us" for b in builds], *[f"{b}/{builds[0]}" for b in builds[1:]]]
    rows = [[short_case(c["case"]), *[f"{c['us'][b]:.2f}" for b in builds], *[f"{c['ratio'][b]:.3f}" for b in builds[1:]]]
            for c in report["cases"]]
    return Table(title, headers, rows)
