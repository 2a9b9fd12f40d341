"""Perplexity and KL-divergence against a base model, with the build's llama-perplexity."""

from __future__ import annotations

import re
from pathlib import Path

from ..builds import Build
from . import BenchError

_NUM = r"([-+]?(?:[\d.]+(?:e[-+]?\d+)?|nan|inf))"
# Ours print "PPL = x +/- e" on stderr, ik_llama.cpp "PPL over N chunks for n_ctx=C = x +/- e" on stdout.
_FINAL = re.compile(rf"Final estimate: PPL(?: over \d+ chunks for n_ctx=\d+)? = {_NUM} \+/- {_NUM}")
# The mean KLD of a model against its own saved logits can print as -0.000001: signs are allowed.
_STATS = {
    "ppl": re.compile(rf"Mean PPL\(Q\)\s*:\s*{_NUM}\s*±\s*{_NUM}"),
    "kld": re.compile(rf"Mean\s+KLD:\s*{_NUM}\s*±\s*{_NUM}"),
    "same_top_p": re.compile(rf"Same top p:\s*{_NUM}\s*±\s*{_NUM}"),
}


def parse_final_ppl(log: str) -> dict:
    m = _FINAL.search(log)
    if not m:
        raise BenchError("llama-perplexity printed no final estimate")
    return {"ppl": float(m[1]), "ppl_err": float(m[2])}


def parse_kld_stats(out: str) -> dict:
    """PPL, mean KLD (nats/token) and top-token agreement (%) from a --kl-divergence run."""
    result = {}
    for key, pattern in _STATS.items():
        m = pattern.search(out)
        if not m:
            raise BenchError(f"llama-perplexity printed no {key} statistic")
        result[key], result[key + "_err"] = float(m[1]), float(m[2])
    return result


def on_text(build: Build, model: Path, text: Path, ctx: int, chunks: int, threads: int,
            save_logits: Path | None = None) -> dict:
    """Perplexity over `chunks` windows of `ctx` tokens; optionally saving the logits as a KLD base."""
    args = ["-m", str(model), "-f", str(text), "-c", str(ctx), "--chunks", str(chunks), "-t", str(threads)]
    if save_logits is not None:
        args += ["--kl-divergence-base", str(save_logits)]
    proc = build.run("llama-perplexity", args)
    return parse_final_ppl(proc.stdout + proc.stderr)


def against_base(build: Build, model: Path, base: Path, threads: int) -> dict:
    """Perplexity, mean KLD and same-top-token rate of `model` on the tokens saved in `base`."""
    proc = build.run("llama-perplexity",
                     ["-m", str(model), "-t", str(threads), "--kl-divergence-base", str(base), "--kl-divergence"])
    return parse_kld_stats(proc.stdout + proc.stderr)
