"""Log-likelihood scoring of multiple-choice items with llama-cpp-python on one build.

Runs as a worker process (`python -m awq2gguf.bench.mc_score MODEL ITEMS.json`) because
llama-cpp-python picks its libllama.so from LLAMA_CPP_LIB_PATH at import time. It prints one
JSON line per item, so the caller can show progress and keep what finished if interrupted.
"""

from __future__ import annotations

import json
import sys

import numpy as np


def continuation_logprob(logits: np.ndarray, tokens: list[int]) -> float:
    """Sum of log p(token_i | prefix) given logits[i] predicting tokens[i]."""
    logits = logits.astype(np.float64)
    top = logits.max(axis=1, keepdims=True)
    log_z = (top + np.log(np.exp(logits - top).sum(axis=1, keepdims=True)))[:, 0]
    return float((logits[np.arange(len(tokens)), tokens] - log_z).sum())


def choose(logprobs: list[float], n_bytes: list[int], normalised: bool) -> int:
    """Index of the chosen answer: highest log-likelihood, per byte of continuation if normalised."""
    scores = [lp / nb for lp, nb in zip(logprobs, n_bytes)] if normalised else logprobs
    return int(np.argmax(scores))


class Scorer:
    def __init__(self, model: str, threads: int, n_ctx: int = 1024):
        from llama_cpp import Llama

        self.llm = Llama(model_path=model, n_ctx=n_ctx, n_batch=512, n_threads=threads,
                         n_threads_batch=threads, logits_all=True, verbose=False)
        self.prefix: list[int] = []

    def _eval_context(self, tokens: list[int]) -> None:
        # Choices usually share their context: evaluate it once and rewind to it per choice.
        if tokens != self.prefix:
            self.llm.reset()
            self.llm.eval(tokens)
            self.prefix = tokens
        self.llm.n_tokens = len(tokens)

    def score(self, context: str, continuation: str) -> float:
        ctx = self.llm.tokenize(context.encode(), add_bos=True, special=False)
        cont = self.llm.tokenize(continuation.encode(), add_bos=False, special=False)
        self._eval_context(ctx)
        self.llm.eval(cont)
        n = len(ctx)
        return continuation_logprob(np.asarray(self.llm.scores[n - 1:n - 1 + len(cont)]), cont)


def main(argv: list[str]) -> None:
    model, items_path, threads = argv[0], argv[1], int(argv[2])
    scorer = Scorer(model, threads)
    with open(items_path) as f:
        items = json.load(f)
    for pairs in items:
        logprobs = [scorer.score(ctx, cont) for ctx, cont in pairs]
        n_bytes = [len(cont.encode()) for _, cont in pairs]
        print(json.dumps({"logprobs": logprobs, "n_bytes": n_bytes}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
