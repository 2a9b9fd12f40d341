"""Sample calibration sequences from a GGUF with llama.cpp, all sequences decoded as one batch.

Run as `python -m awq2gguf.calibration_worker MODEL OUT.npy SAMPLES TOKENS SEED THREADS [PROMPTS.json]`
with a build's environment (LLAMA_CPP_LIB_PATH is read at import). Sequence i starts with
prompt i of PROMPTS.json (a list of token-id lists, shorter than TOKENS) or else with BOS (EOS
when the vocabulary has none), and continues by sampling the model's whole next-token
distribution at temperature 1 (a top-k of 40 made text more predictable than what the model
meets, and AWQ calibrated on it closed less of the perplexity gap on both development models;
bench/results/README.md, AWQ: ways to make an all-Q4_0 development model); end-of-generation
tokens are never sampled, so every sequence has exactly TOKENS tokens. After each
step it prints "done total" for the caller's progress bar; the ids go to OUT.npy.
"""

from __future__ import annotations

import json
import sys

import numpy as np


def sample_next(logits: np.ndarray, banned: np.ndarray, rng: np.random.Generator) -> int:
    """A token drawn from softmax(logits) over the whole vocabulary, never one of banned."""
    logits = logits.astype(np.float64)
    logits[banned] = -np.inf
    p = np.exp(logits - logits.max())
    return int(rng.choice(len(logits), p=p / p.sum()))


def sample(model_path: str, n_samples: int, n_tokens: int, seed: int, threads: int,
           prompts: list[list[int]] | None = None) -> np.ndarray:
    from llama_cpp import llama_cpp as ll

    ll.llama_backend_init()
    model = ll.llama_model_load_from_file(model_path.encode(), ll.llama_model_default_params())
    if not model:
        raise SystemExit(f"cannot load {model_path}")
    cparams = ll.llama_context_default_params()
    cparams.n_ctx = n_samples * n_tokens
    prompt_tokens = sum(len(p) for p in prompts) if prompts else 0
    cparams.n_batch = cparams.n_ubatch = max(n_samples, 32, prompt_tokens)
    cparams.n_seq_max = n_samples
    cparams.n_threads = cparams.n_threads_batch = threads
    ctx = ll.llama_init_from_model(model, cparams)
    if not ctx:
        raise SystemExit("cannot create a llama.cpp context")
    vocab = ll.llama_model_get_vocab(model)
    n_vocab = ll.llama_vocab_n_tokens(vocab)
    banned = np.array([t for t in range(n_vocab) if ll.llama_vocab_is_eog(vocab, t)], dtype=np.int64)
    start = ll.llama_vocab_bos(vocab)
    if start < 0:
        start = ll.llama_vocab_eos(vocab)

    rng = np.random.default_rng(seed)
    ids = np.empty((n_samples, n_tokens), dtype=np.int64)
    starts = prompts or [[start]] * n_samples
    for s, p in enumerate(starts):
        ids[s, :len(p)] = p
    lengths = [len(p) for p in starts]
    # The prompts' tokens all go in the first batch; afterwards each sequence decodes its newest
    # token at its own position.
    batch = ll.llama_batch_init(max(n_samples, prompt_tokens), 0, 1)
    try:
        for step in range(n_tokens - min(lengths)):
            batch.n_tokens = 0
            active = [s for s in range(n_samples) if lengths[s] < n_tokens]
            for s in active:
                first = 0 if step == 0 else lengths[s] - 1
                for pos in range(first, lengths[s]):
                    b = batch.n_tokens
                    batch.token[b], batch.pos[b], batch.n_seq_id[b] = int(ids[s, pos]), pos, 1
                    batch.seq_id[b][0], batch.logits[b] = s, pos == lengths[s] - 1
                    batch.n_tokens += 1
            if ll.llama_decode(ctx, batch) != 0:
                raise SystemExit(f"llama_decode failed at step {step}")
            for s in active:
                logits = np.ctypeslib.as_array(ll.llama_get_logits_ith(ctx, -len(active) + active.index(s)),
                                               shape=(n_vocab,))
                ids[s, lengths[s]] = sample_next(logits, banned, rng)
                lengths[s] += 1
            print(min(lengths), n_tokens, flush=True)
    finally:
        ll.llama_batch_free(batch)
        ll.llama_free(ctx)
        ll.llama_model_free(model)
    return ids


if __name__ == "__main__":
    model, out = sys.argv[1], sys.argv[2]
    n_samples, n_tokens, seed, threads = map(int, sys.argv[3:7])
    prompts = json.loads(open(sys.argv[7]).read()) if len(sys.argv) > 7 else None
    np.save(out, sample(model, n_samples, n_tokens, seed, threads, prompts))
