"""The peer ik_llama.cpp: `scripts/build-ik.sh` builds only the pinned commit, and bench runs the built
peer beside our builds on the same file. Building it needs a clone: with AWQ2GGUF_IK_SRC set to one,
the live test builds it (about 25 minutes on 2 cores the first time); without, it is skipped."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from awq2gguf.bench import perplexity
from awq2gguf.builds import PEER_MODES, BuildMissing, get_build

REPO = Path(__file__).resolve().parents[1]
PIN = dict(line.split("=", 1) for line in (REPO / "vendor" / "ik-pin.env").read_text().splitlines()
           if line and not line.startswith("#"))


def build_ik(*args, cwd=REPO):
    return subprocess.run(["scripts/build-ik.sh", *args], cwd=cwd, capture_output=True, text=True, timeout=3600)


def test_the_pin_names_one_full_commit():
    assert len(PIN["IK_LLAMA_CPP_COMMIT"]) == 40 and int(PIN["IK_LLAMA_CPP_COMMIT"], 16) >= 0


def test_without_a_source_it_says_how_to_call_it():
    proc = build_ik()
    assert proc.returncode == 2 and "usage: scripts/build-ik.sh IK_SRC" in proc.stderr
    make = subprocess.run(["make", "-s", "ik-build"], cwd=REPO, capture_output=True, text=True)
    assert make.returncode != 0 and "set IK_SRC to a clone of ik_llama.cpp" in make.stderr


def test_a_folder_that_is_not_a_clone_is_refused(tmp_path):
    proc = build_ik(str(tmp_path))
    assert proc.returncode == 1
    assert f"is not a git clone of ik_llama.cpp; clone {PIN['IK_LLAMA_CPP_REPO']}" in proc.stderr


def test_another_commit_is_refused_with_the_checkout_to_make(tmp_path):
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "CMakeLists.txt").write_text("project(not_ik)\n")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "other"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()

    proc = build_ik(str(tmp_path))
    assert proc.returncode == 1
    assert f"is at {head[:12]}, but the comparison is pinned to {PIN['IK_LLAMA_CPP_COMMIT'][:12]}" in proc.stderr
    assert f"git -C {tmp_path} checkout {PIN['IK_LLAMA_CPP_COMMIT']}" in proc.stderr


def test_bench_names_the_peer_and_how_to_build_it(tmp_path, monkeypatch):
    import awq2gguf.builds as builds
    monkeypatch.setattr(builds, "BUILD_DIR", tmp_path / "build")  # no build/ik there
    for mode in PEER_MODES:
        with pytest.raises(BuildMissing, match=r"the ik(-rtr)? build is missing .*run `make ik-build IK_SRC=DIR`"):
            get_build(mode)
    proc = subprocess.run([sys.executable, "-m", "awq2gguf.bench.cli", "decode", "--builds", "patched,ik-fast"],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "unknown build(s) ik-fast; choose from stock, patched, ik, ik-rtr" in proc.stderr


def test_the_peers_repack_is_asked_as_each_of_its_tools_takes_it(tmp_path, monkeypatch):
    import awq2gguf.builds as builds
    monkeypatch.setattr(builds, "BUILD_DIR", tmp_path)
    (tmp_path / "ik" / "bin").mkdir(parents=True)
    (tmp_path / "ik" / "bin" / "libllama.so").touch()
    ik, rtr = get_build("ik"), get_build("ik-rtr")
    assert ik.is_peer and ik.mode_args("llama-bench") == () == ik.mode_args("llama-perplexity")
    assert rtr.mode_args("llama-bench") == ("-rtr", "1")  # its llama-bench: -rtr <0|1>
    assert rtr.mode_args("llama-perplexity") == rtr.mode_args("llama-batched-bench") == ("-rtr",)  # the rest: a flag


@pytest.fixture(scope="module")
def ik_built():
    src = os.environ.get("AWQ2GGUF_IK_SRC")
    if not src:
        pytest.skip("set AWQ2GGUF_IK_SRC to a clone of ik_llama.cpp at vendor/ik-pin.env's commit to test the peer")
    proc = build_ik(src)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {mode: get_build(mode) for mode in PEER_MODES}


@pytest.mark.slow
def test_the_peer_runs_the_patched_file_to_the_same_perplexity(ik_built, builds, tiny_q4_0, tmp_path):
    """Both of the peer's modes on the patched build's all-Q4_0 file: the perplexity of the patched
    build within 0.1% (its kernels round the activations' sums differently, not the model)."""
    model = tiny_q4_0[("tiny-untied", "patched")]
    text = tmp_path / "text.txt"
    text.write_text(" ".join(f"Sentence {i} talks about the weather on day {i % 7}." for i in range(400)))
    ours = perplexity.on_text(builds["patched"], model, text, 128, 2, 2)["ppl"]
    for build in ik_built.values():
        theirs = perplexity.on_text(build, model, text, 128, 2, 2)["ppl"]
        assert theirs == pytest.approx(ours, rel=1e-3), build.name


@pytest.mark.slow
def test_bench_decode_runs_our_builds_and_the_peers_modes_on_one_file(ik_built, builds, tiny_q4_0, tmp_path):
    model = tiny_q4_0[("tiny-untied", "patched")]
    env = dict(os.environ, AWQ2GGUF_RESULTS=str(tmp_path / "results"))
    proc = subprocess.run([sys.executable, "-m", "awq2gguf.bench.cli", "decode", "--model", str(model),
                           "--builds", "patched,ik,ik-rtr", "--reps", "2", "--n-gen", "16", "--threads", "2",
                           "--json"], capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert [b["build"] for b in report["builds"]] == ["patched", "ik", "ik-rtr"]
    assert all(b["tokens_per_s"]["median"] > 0 and len(b["tokens_per_s"]["samples"]) == 2 for b in report["builds"])
    assert set(report["ratios"]) == {"ik", "ik-rtr"}
