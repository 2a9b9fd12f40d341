"""`bench decode/prefill`: output parsing, A/B statistics, the live command, its warnings."""

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from awq2gguf.bench import BenchError
from awq2gguf.bench.batched_bench import parse_decode_tps
from awq2gguf.bench.llama_bench import Run, parse_llama_bench_json
from awq2gguf.bench.machine import threads_warning
from awq2gguf.bench.speed import BuildResult, paired_ratios

DATA = Path(__file__).parent / "data"


def test_parses_captured_llama_bench_json():
    assert parse_llama_bench_json((DATA / "llama-bench-tg4-r2.json").read_text()) == pytest.approx(351.124677)


def test_garbage_output_is_an_error():
    with pytest.raises(BenchError, match="no JSON"):
        parse_llama_bench_json("llama-bench: error loading model\n")


@pytest.mark.parametrize("capture, tps", [("llama-batched-bench-npl-1-2.md", (3194.89, 5468.22)),
                                          ("ik-llama-batched-bench-npl-1-2.md", (1773.84, 2315.82))])
def test_parses_the_decode_column_of_captured_llama_batched_bench_tables(capture, tps):
    """Our builds' and the peer's llama-batched-bench print the same table: S_TG per stream count."""
    text = (DATA / capture).read_text()
    assert (parse_decode_tps(text, 1), parse_decode_tps(text, 2)) == pytest.approx(tps)
    with pytest.raises(BenchError, match="no row for 4 streams"):
        parse_decode_tps(text, 4)


def test_paired_ratio_statistics(tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"x" * 2**20)
    a = BuildResult("stock", model, [Run(10.0, 100 * 2**20), Run(20.0, 120 * 2**20), Run(10.0, 90 * 2**20)])
    b = BuildResult("patched", model, [Run(12.0, 80 * 2**20), Run(22.0, 80 * 2**20), Run(15.0, 80 * 2**20)])
    r = paired_ratios(b, a)
    assert r["samples"] == pytest.approx([1.2, 1.1, 1.5])
    assert (r["median"], r["min"], r["max"]) == pytest.approx((1.2, 1.1, 1.5))
    s = a.summary()
    assert s["tokens_per_s"]["median"] == 10.0
    assert s["ms_per_128_tokens"] == pytest.approx(12800.0)
    assert s["peak_rss_mib"] == pytest.approx(120.0)
    assert s["model_size_mib"] == pytest.approx(1.0)


def test_threads_above_physical_cores_warns():
    assert threads_warning(1) is None
    assert "exceeds" in threads_warning(1024)


@pytest.mark.parametrize("kind,flag,runner", [("decode", "--n-gen", "binary"), ("prefill", "--n-prompt", "binary"),
                                              ("decode", "--n-gen", "python"), ("prefill", "--n-prompt", "python")])
def test_live_ab_run_on_a_tiny_model(builds, tiny_f16, tmp_path, kind, flag, runner):
    env = {"AWQ2GGUF_MODELS": str(tmp_path), "AWQ2GGUF_RESULTS": str(tmp_path / "results"), "PATH": "/usr/bin:/bin"}
    # Place the synthetic F16 where bench looks for it, so it is not regenerated.
    (tmp_path / "synthetic-tiny-tied-f16.gguf").symlink_to(tiny_f16["tiny-tied"])
    proc = subprocess.run(
        [sys.executable, "-m", "awq2gguf.bench.cli", kind, "--shape", "tiny-tied", "--reps", "2",
         "--threads", "1", flag, "8", "--runner", runner, "--json"],
        env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert [b["build"] for b in report["builds"]] == ["stock", "patched"] and report["runner"] == runner
    for b in report["builds"]:
        assert len(b["tokens_per_s"]["samples"]) == 2 and b["tokens_per_s"]["median"] > 0
        assert b["peak_rss_mib"] > 1 and Path(b["model"]).name.endswith(f".{b['build']}.gguf")
    assert len(report["ratios"]["patched"]["samples"]) == 2
    # Each build ran the file its own quantizer made: patched all-Q4_0 is the smaller one.
    sizes = {b["build"]: b["model_size_mib"] for b in report["builds"]}
    assert sizes["patched"] < sizes["stock"]


def test_live_batched_run_on_a_tiny_model(builds, tiny_f16, tmp_path):
    env = {"AWQ2GGUF_MODELS": str(tmp_path), "AWQ2GGUF_RESULTS": str(tmp_path / "results"), "PATH": "/usr/bin:/bin"}
    (tmp_path / "synthetic-tiny-tied-f16.gguf").symlink_to(tiny_f16["tiny-tied"])
    proc = subprocess.run(
        [sys.executable, "-m", "awq2gguf.bench.cli", "batched", "--shape", "tiny-tied", "--streams", "1,3",
         "--reps", "2", "--threads", "1", "--n-gen", "8", "--json"], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert [(r["streams"], r["build"]) for r in report["rows"]] == [(1, "stock"), (1, "patched"), (3, "stock"),
                                                                   (3, "patched")]
    for r in report["rows"]:
        assert len(r["tokens_per_s"]["samples"]) == 2 and r["tokens_per_s"]["median"] > 0 and r["peak_rss_mib"] > 1
        assert (r["ratio"] is None) == (r["build"] == "stock")


@pytest.mark.parametrize("streams", ["0,2", "2,2", "1,x"])
def test_bad_stream_counts_are_rejected(streams):
    proc = subprocess.run([sys.executable, "-m", "awq2gguf.bench.cli", "batched", "--streams", streams],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "--streams" in proc.stderr


def test_unknown_build_is_rejected():
    proc = subprocess.run([sys.executable, "-m", "awq2gguf.bench.cli", "decode", "--builds", "stock,fast"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "unknown build(s) fast" in proc.stderr


@pytest.mark.parametrize("seeds, message", [("0,x", "is not a comma-separated list of integers"),
                                            ("1,1", "repeats a seed")])
def test_bad_awq_seeds_are_rejected(seeds, message):
    proc = subprocess.run([sys.executable, "-m", "awq2gguf.bench.cli", "awq", "--seeds", seeds],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and message in proc.stderr


@pytest.mark.parametrize("args, message", [(["--counts", "0"], "at least one above 0"),
                                           (["--counts", "2,-1"], "give block counts >= 0"),
                                           (["--methods", "sleb,random"], "unknown method random")])
def test_bad_prune_choices_are_rejected(args, message):
    proc = subprocess.run([sys.executable, "-m", "awq2gguf.bench.cli", "prune", *args], capture_output=True, text=True)
    assert proc.returncode == 2 and message in " ".join(proc.stderr.split())


def test_peak_rss_is_the_commands_own_not_the_callers():
    from awq2gguf.bench.peak_rss import run_with_peak_rss

    ballast = b"x" * (400 * 2**20)  # makes this process large, as bench is after loading a model
    small, small_peak = run_with_peak_rss(["/bin/true"])
    big, big_peak = run_with_peak_rss([sys.executable, "-c", "b = bytearray(300 * 2**20); b[::4096] = b'x' * len(b[::4096])"])
    assert small.returncode == 0 and big.returncode == 0
    assert small_peak < 60 * 2**20
    assert 300 * 2**20 < big_peak < 360 * 2**20
    del ballast


def test_busy_machine_guard_triggers_under_load():
    from awq2gguf.bench.machine import busy_warning
    from awq2gguf.host import physical_cores

    cores = physical_cores()
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cores)]
    try:
        assert "busy" in busy_warning(threads=cores, sample_s=1.0)
    finally:
        for p in spinners:
            p.kill()
            p.wait()


def _as_saved(report, data: dict) -> dict:
    """report.to_json() without the fields `data` (the saved JSON) lacks: at the top, and in each row
    only those that hold their row type's default (rows saved before that field existed)."""
    out = {k: v for k, v in report.to_json().items() if k in data}
    for name, row_type in type(report).ROWS.items():
        defaults = {f.name: f.default for f in dataclasses.fields(row_type)}
        out[name] = [{k: v for k, v in row.items() if k in saved or v != defaults[k]}
                     for row, saved in zip(out[name], data[name])]
    return out


def test_every_saved_report_loads_back_into_its_type_and_renders():
    """bench report must keep reading the committed results: each raw JSON becomes its report type
    unchanged (no field lost or invented, typed rows included) and renders a table with a row per entry."""
    from awq2gguf.bench import results, tables
    from awq2gguf.bench.cli import COMMANDS
    from awq2gguf.bench.reports import REPORT_TYPES

    names = {c.name for c in COMMANDS}
    # every command saves a report; a mode of one (serve --soak) may save a kind of its own
    assert names <= set(REPORT_TYPES) and all(k.rsplit("-", 1)[0] in names or k in names for k in REPORT_TYPES)
    raw = sorted((Path(__file__).parents[1] / "bench" / "results" / "raw").glob("*.json"))
    assert raw
    for path in raw:
        data = json.loads(path.read_text())
        report = results.load(path)
        assert type(report) is REPORT_TYPES[data["kind"]]
        assert _as_saved(report, data) == data, path.name
        table = report.titled_table()
        assert table.rows and all(len(row) == len(table.headers) for row in table.rows), path.name
        assert tables.markdown(table).count("\n| ") == len(table.rows) + 2  # the header, its rule, the rows


@pytest.mark.parametrize("kind, draw", [("decode", "speed_bars"), ("eval", "accuracy_vs_size"),
                                        ("prune", "accuracy_vs_speed")])
def test_each_plot_draws_a_saved_report(kind, draw, tmp_path):
    import awq2gguf.bench.cli  # noqa: F401  (registers the report types)
    from awq2gguf.bench import plots, results

    path = max((Path(__file__).parents[1] / "bench" / "results" / "raw").glob(f"{kind}-*.json"))
    getattr(plots, draw)(results.load(path), tmp_path / "plot.png")
    assert (tmp_path / "plot.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_report_row_with_a_field_missing_or_unknown_does_not_load():
    import awq2gguf.bench.cli  # noqa: F401  (registers the report types)
    from awq2gguf.bench.reports import from_json

    row = {"target": "128", "shape": "decode", "k": 896, "n": 896, "m": 1, "stock": 10, "patched": 5, "ratio": 0.5}
    assert from_json({"kind": "arm", "note": "", "rows": [row]}).rows[0].ratio == 0.5
    for bad in ({k: v for k, v in row.items() if k != "ratio"}, {**row, "speed": 1.0}):
        with pytest.raises(TypeError):
            from_json({"kind": "arm", "note": "", "rows": [bad]})


def test_soak_summary_windows_and_rss_growth():
    from awq2gguf.bench.serve import summarise_soak

    run = {"ends_s": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], "errors": ["request 3: APIError: x"],
           "rss": [(0, 100), (0.9, 150), (1.0, 200), (5, 210), (9.5, 205)]}
    s = summarise_soak(run, windows=2, warm_up=0.1)
    assert s["requests_per_s_windows"] == [1.0, 1.0] and s["requests_per_s"] == 1.0
    assert (s["requests"], s["errors"], s["wall_s"]) == (10, 1, 10)
    # warm-up ends with the first request (t = 1): RSS 200 there, 210 at most after
    assert s["rss_growth"] == pytest.approx(0.05) and s["rss_warm_mib"] == 200 / 2**20
    # the second half starts at the fifth request's end (t = 5): RSS 210 there, nothing larger after
    assert s["rss_growth_late"] == 0
