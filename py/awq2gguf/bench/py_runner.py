"""Speed through llama-cpp-python on one build's libllama.so, as an application would see it.

Runs as a worker (`python -m awq2gguf.bench.py_runner MODEL THREADS N_PROMPT N_GEN`), since
LLAMA_CPP_LIB_PATH is read at import. Like llama-bench it feeds fixed token ids (no sampling),
after a warm-up, and prints {"tokens_per_s": ...}.
"""

from __future__ import annotations

import json
import sys
import time


def measure(model: str, threads: int, n_prompt: int, n_gen: int) -> float:
    from llama_cpp import Llama

    llm = Llama(model_path=model, n_ctx=max(n_prompt + n_gen, 16) + 1, n_batch=max(n_prompt, 1),
                n_threads=threads, n_threads_batch=threads, verbose=False)
    bos = llm.token_bos()
    tokens = [(bos + 1 + 7919 * i) % llm.n_vocab() for i in range(max(n_prompt, n_gen))]
    llm.eval([bos, tokens[0]])  # warm-up: page in weights, build repacked buffers
    llm.reset()
    if n_prompt:
        start = time.perf_counter()
        llm.eval(tokens[:n_prompt])
        return n_prompt / (time.perf_counter() - start)
    llm.eval([bos])
    start = time.perf_counter()
    for t in tokens[:n_gen]:
        llm.eval([t])
    return n_gen / (time.perf_counter() - start)


if __name__ == "__main__":
    model, threads, n_prompt, n_gen = sys.argv[1], *map(int, sys.argv[2:5])
    print(json.dumps({"tokens_per_s": measure(model, threads, n_prompt, n_gen)}))
