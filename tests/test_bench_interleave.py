"""The order in which bench's A/B commands run what they compare: ABBA, the same in all four."""

from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pytest

from awq2gguf.bench import ops, prune, serve, speed
from awq2gguf.bench.interleave import abba
from awq2gguf.bench.llama_bench import Run

VARIANTS = ["a", "b", "c"]


def _expected(n: int, reps: int) -> list[str]:
    """The order the commands ran before they shared bench.interleave: by index, every other
    repetition reversed."""
    return [VARIANTS[i] for rep in range(reps) for i in list(range(n))[::1 if rep % 2 == 0 else -1]]


def test_abba_for_two_variants():
    assert [list(order) for order in abba(["a", "b"], 4)] == [["a", "b"], ["b", "a"], ["a", "b"], ["b", "a"]]


CASES = pytest.mark.parametrize("n, reps", [(n, reps) for n in (1, 2, 3) for reps in (1, 2, 3, 4)])


@CASES
def test_speed_runs(n, reps):
    ran = []

    def runner(build, model, threads, n_prompt, n_gen):
        ran.append(build.name)
        return Run(1.0, 0)

    builds = [SimpleNamespace(name=v) for v in VARIANTS[:n]]
    speed.run_interleaved(runner, builds, {v: Path(v) for v in VARIANTS}, 1, 0, 1, reps,
                          before_rep=lambda: ran.append("|"))
    assert ran == [x for order in _split(_expected(n, reps), n) for x in ["|", *order]]


@CASES
def test_ops_runs(n, reps, monkeypatch):
    ran = []
    monkeypatch.setattr(ops, "run_once", lambda build, cases: ran.append(build.name) or {"case": 1.0})
    ops.run_interleaved([SimpleNamespace(name=v) for v in VARIANTS[:n]], None, reps)
    assert ran == _expected(n, reps)


@CASES
def test_serve_runs(n, reps, monkeypatch):
    ran = []

    @contextmanager
    def bench_served(model, config, threads, queue):
        ran.append(config.label())
        yield None

    monkeypatch.setattr(serve, "bench_served", bench_served)
    configs = [SimpleNamespace(label=lambda v=v: v) for v in VARIANTS[:n]]
    serve.on_servers(configs, reps, Path("m"), 1, 1, lambda server: None)
    assert ran == _expected(n, reps)


@CASES
def test_prune_runs(n, reps, monkeypatch):
    ran = []

    def runner(build, path, threads, n_prompt, n_gen):
        ran.append(path.name)
        return Run(1.0, 0)

    monkeypatch.setitem(prune.RUNNERS, "binary", runner)
    prune.interleaved_speed(None, [Path(v) for v in VARIANTS[:n]], 1, 0, 1, reps)
    assert ran == _expected(n, reps)


def _split(seq: list, n: int) -> list[list]:
    return [seq[i:i + n] for i in range(0, len(seq), n)]
