"""Sample calibration sequences from a GGUF with llama.cpp, all sequences decoded as one batch.

Run as `python -m awq2gguf.calibration_worker MODEL OUT.npy SAMPLES TOKENS SEED THREADS` with a
build's environment (LLAMA_CPP_LIB_PATH is read at import). Each sequence starts with BOS (EOS
when the vocabulary has none) and continues with top-k 40 sampling at temperature 1; end-of-
generation tokens are never sampled, so every sequence has exactly TOKENS tokens. After each
step it prints "done total" for the caller's progress bar; the ids go to OUT.npy.
"""

from __future__ import annotations

import sys

import numpy as np

TOP_K = 40


def sample(model_path: str, n_samples: int, n_tokens: int, seed: int, threads: int) -> np.ndarray:
    from llama_cpp import llama_cpp as ll

    ll.llama_backend_init()
    model = ll.llama_model_load_from_file(model_path.encode(), ll.llama_model_default_params())
    if not model:
        raise SystemExit(f"cannot load {model_path}")
    cparams = ll.llama_context_default_params()
    cparams.n_ctx = n_samples * n_tokens
    cparams.n_batch = cparams.n_ubatch = max(n_samples, 32)
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
    ids[:, 0] = start
    batch = ll.llama_batch_init(n_samples, 0, 1)
    try:
        for pos in range(n_tokens - 1):
            batch.n_tokens = n_samples
            for s in range(n_samples):
                batch.token[s], batch.pos[s], batch.n_seq_id[s] = int(ids[s, pos]), pos, 1
                batch.seq_id[s][0], batch.logits[s] = s, True
            if ll.llama_decode(ctx, batch) != 0:
                raise SystemExit(f"llama_decode failed at position {pos}")
            logits = np.ctypeslib.as_array(ll.llama_get_logits(ctx), shape=(n_samples, n_vocab)).astype(np.float64)
            logits[:, banned] = -np.inf
            top = np.argpartition(logits, -TOP_K, axis=1)[:, -TOP_K:]
            top_logits = np.take_along_axis(logits, top, axis=1)
            p = np.exp(top_logits - top_logits.max(axis=1, keepdims=True))
            p /= p.sum(axis=1, keepdims=True)
            for s in range(n_samples):
                ids[s, pos + 1] = top[s, rng.choice(TOP_K, p=p[s])]
            print(pos + 2, n_tokens, flush=True)
    finally:
        ll.llama_batch_free(batch)
        ll.llama_free(ctx)
        ll.llama_model_free(model)
    return ids


if __name__ == "__main__":
    model, out = sys.argv[1], sys.argv[2]
    n_samples, n_tokens, seed, threads = map(int, sys.argv[3:7])
    np.save(out, sample(model, n_samples, n_tokens, seed, threads))
