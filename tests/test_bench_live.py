"""bench eval / ops / roofline / report end to end on tiny models, and the MC scorer on a real one."""

import json
import subprocess
import sys

import pytest

from awq2gguf import quality
from awq2gguf.bench.eval import run_mc_task
from awq2gguf.bench.ops import short_case
from awq2gguf.bench.tasks import Item, Task
from awq2gguf.assets.dev_models import source_gguf


def bench(tmp_path, *args, timeout=900):
    env = {"AWQ2GGUF_RESULTS": str(tmp_path / "results"), "AWQ2GGUF_MODELS": str(tmp_path / "models"),
           "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "awq2gguf.bench.cli", *args], env=env, capture_output=True,
                          text=True, timeout=timeout)


def test_mc_scorer_picks_answers_a_real_model_is_forced_to(builds):
    """SmolLM2-135M continues a count and a repeated pattern; the scorer must pick those."""
    count = "Counting: 1, 2, 3, 4, 5, 6, 7, 8, 9,"
    colours = "red green blue red green blue red green"
    items = [Item(((count, " purple"), (count, " 10")), gold=1),
             Item(((colours, " blue"), (colours, " seven")), gold=0)]
    task = Task("forced", "", lambda row: row, normalised=False)
    r = run_mc_task(builds["patched"], source_gguf("smollm2"), task, items, threads=2)
    assert (r["n"], r["acc"]) == (2, 1.0)


def test_eval_on_tiny_models_with_kld(tiny_f16, tiny_q4_0, tmp_path):
    text = tmp_path / "text.txt"
    text.write_text(" ".join(f"Sentence {i} talks about the weather on day {i % 7}." for i in range(400)))
    proc = bench(tmp_path, "eval", "--model", str(tiny_q4_0[("tiny-tied", "patched")]), "--model",
                 str(tiny_q4_0[("tiny-tied", "stock")]), "--base", str(tiny_f16["tiny-tied"]), "--build", "stock",
                 "--text", str(text), "--ctx", "128", "--chunks", "2", "--tasks", "piqa", "--limit", "3",
                 "--threads", "2", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert len(report["rows"]) == 2 and report["tasks"] == {"piqa": "acc_norm"}
    for row in report["rows"]:
        assert row["ppl"] > 1 and row["kld"] > 0 and 0 <= row["same_top_p"] <= 100
        assert row["tasks"]["piqa"]["n"] == 3 and row["mc_average"] == row["tasks"]["piqa"]["score"]
    assert list((tmp_path / "results" / "raw").glob("eval-*.json"))

    md = bench(tmp_path, "report")
    assert md.returncode == 0 and "| model | size MiB | PPL | KLD | same top % | piqa (acc_norm) |" in md.stdout


def test_eval_without_text_says_what_to_pass(tmp_path):
    proc = bench(tmp_path, "eval", "--text", str(tmp_path / "missing.txt"), "--tasks", "none")
    assert proc.returncode == 2
    assert "Pass --text FILE or set AWQ2GGUF_EVAL_TEXT" in proc.stderr


def test_report_without_results_is_a_clear_error(tmp_path):
    proc = bench(tmp_path, "report")
    assert proc.returncode == 1 and "run a bench command first" in proc.stderr


def test_ops_times_rope_at_the_models_own_shapes(builds, tmp_path):
    proc = bench(tmp_path, "ops", "--op", "ROPE", "--shape", "tiny-tied", "--reps", "1", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    cases = json.loads(proc.stdout)["cases"]
    assert cases and all(c["case"].startswith("ROPE(") for c in cases)
    # tiny-tied: head_dim 32, 4 query and 2 KV heads; prefill (512 tokens) and decode (1 token).
    shapes = {short_case(c["case"]).split()[2] for c in cases}
    assert {"[32,4,512,1]", "[32,2,512,1]", "[32,4,1,1]", "[32,2,1,1]"} <= shapes, shapes
    assert all(c["us"]["stock"] > 0 and c["ratio"]["patched"] > 0 for c in cases)


def test_roofline_reports_fractions(builds, tmp_path):
    proc = bench(tmp_path, "roofline", "--shape", "tiny-tied", "--reps", "1", "--threads", "1", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["bandwidth"]["read_gbs"] > 0.5
    for row in report["rows"]:
        assert 0 < row["decode_fraction"] and 0 < row["prefill_fraction"]
        assert row["decode_bound_tps"] == pytest.approx(report["bandwidth"]["read_gbs"] * 1e9 / row["bytes_per_token"])


def test_awq_cost_times_awq2gguf_on_a_synthetic_checkpoint(tmp_path):
    proc = bench(tmp_path, "awq-cost", "--shape", "tiny-tied", "--calib-samples", "2", "--calib-tokens", "64",
                 "--threads", "2", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["kind"] == "awq-cost" and report["seconds"] > 0 and report["out_mib"] > 0
    # awq2gguf loads torch and the model, so its peak is well above a bare interpreter's
    assert report["peak_rss_mib"] > 100
    # work files (the all-Q4_0 GGUF that samples calibration text, the folded model as Q4_0, the
    # held-out reference log-probabilities) lie beside OUT for a while
    assert report["peak_disk_mib"] > report["out_mib"]
    assert (tmp_path / "models" / "synthetic-tiny-tied-hf" / "config.json").is_file()
    assert report["tune_steps"] == 0 and report["tune_mode"] is None


def test_awq_cost_of_a_block_wise_tuned_job(tmp_path):
    proc = bench(tmp_path, "awq-cost", "--shape", "tiny-tied", "--calib-samples", "4", "--calib-tokens", "64",
                 "--tune-steps", "2", "--tune-mode", "blocks", "--threads", "2", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["tune_steps"] == 2 and report["tune_mode"] == "blocks" and report["seconds"] > 0
    stages = dict(report["stages"])  # each of awq2gguf's stages with its time, as it printed them
    assert any(name.startswith("AWQ search, block by block") for name in stages)
    assert any(name.startswith("tuning 2 blocks through Q4_0") for name in stages)
    assert 0 < sum(stages.values()) <= report["seconds"]


def test_awq_cost_of_quality_best_from_a_file_reports_what_it_chose(calib_text, tmp_path):
    proc = bench(tmp_path, "awq-cost", "--shape", "tiny-tied", "--quality", "best", "--calib", str(calib_text),
                 "--calib-samples", "4", "--search-samples", "2", "--calib-tokens", "64", "--threads", "2", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert (report["quality"], report["calib_source"], report["calib_samples"], report["search_samples"]) == (
        "best", f"file:{calib_text.name}", 4, 2)
    # the preset's, read from the file made
    assert (report["tune_steps"], report["tune_mode"]) == (quality.preset(10**6).tune_steps, "blocks")
    assert f"file:{calib_text.name} 4 x 64 tokens (AWQ search on 2 of them)" in bench(tmp_path, "report").stdout


def test_serve_measures_each_server_at_each_client_count(tiny_q4_0, tmp_path):
    proc = bench(tmp_path, "serve", "--model", str(tiny_q4_0[("tiny-tied", "patched")]), "--clients", "1,2",
                 "--parallel", "1,2", "--requests", "2", "--prompt-words", "8", "--n-gen", "4", "--reps", "2",
                 "--threads", "2", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert [(r["build"], r["clients"], r["requests"]) for r in report["rows"]] == [
        (f"{build}, {parallel} at once", clients, 2 * clients)
        for build in ("stock", "patched") for parallel in (1, 2) for clients in (1, 2)]
    for r in report["rows"]:
        assert r["requests_per_s"] > 0 and 0 < r["ttft_ms_median"] <= r["ttft_ms_max"] and r["embeddings_per_s"] > 0
    assert all(len(reps) == 2 for reps in report["runs"].values())
    md = bench(tmp_path, "report")
    assert md.returncode == 0 and "| server | clients | requests | requests/s | answer tokens/s |" in md.stdout
    assert "embeddings/s (one prompt each) |" in md.stdout


def test_decode_over_two_rpc_servers(tiny_q4_0, two_rpc_servers, tmp_path):
    servers, _ = two_rpc_servers
    proc = bench(tmp_path, "decode", "--model", str(tiny_q4_0[("tiny-tied", "patched")]), "--builds", "patched",
                 "--rpc", ",".join(servers), "--reps", "1", "--n-gen", "8", "--threads", "2", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["rpc"] == servers and report["builds"][0]["tokens_per_s"]["median"] > 0
    assert "layers over the ggml-rpc-servers" in bench(tmp_path, "report").stdout
    refused = bench(tmp_path, "decode", "--rpc", servers[0], "--runner", "python")
    assert refused.returncode == 2 and "--rpc needs --runner binary" in refused.stderr


def test_serve_soak_counts_every_request_and_samples_the_servers_rss(tiny_q4_0, tmp_path):
    """Each --parallel is a server of its own; 8 slots for 3 clients are 3. Every 4th request is an
    embedding request, served by the embedding engine without an error."""
    proc = bench(tmp_path, "serve", "--model", str(tiny_q4_0[("tiny-tied", "patched")]), "--soak", "30",
                 "--clients", "1,3", "--parallel", "1,3,8", "--prompt-words", "8", "--n-gen", "4", "--builds",
                 "patched", "--threads", "2", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    servers = ["patched, 1 at once", "patched, 3 at once"]
    assert [r["build"] for r in report["rows"]] == servers and report["clients"] == 3
    for row in report["rows"]:
        assert (row["requests"], row["errors"]) == (30, 0)
        assert len(row["requests_per_s_windows"]) == 10 and row["requests_per_s"] > 0
        assert row["rss_max_mib"] >= row["rss_warm_mib"] > 10  # the server and its engine, not the client
        assert len(report["runs"][row["build"]]["ends_s"]) == 30
