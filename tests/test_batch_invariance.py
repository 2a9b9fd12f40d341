"""A token's logits are the same bits whether it is decoded alone or in a small batch, at any thread
count (patch 0023: attention over the KV cache in fixed windows): what makes speculative decoding's
greedy answers the answers without it, and an answer independent of the others decoded beside it."""

import json
import subprocess
import sys
from pathlib import Path

import awq2gguf

# Decodes the continuation of a prompt longer than 512 tokens (decode's attention splits the cache
# over the threads from 512 cells on) token by token, then as a batch of k followed by single tokens;
# prints the largest logit difference per k, and saves the token-by-token logits.
SCRIPT = r"""
import json, sys
import numpy as np
from llama_cpp import Llama
model, threads, text, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
llm = Llama(model_path=model, n_ctx=1024, n_threads=threads, n_threads_batch=threads, logits_all=True,
            flash_attn=True, verbose=False)
tokens = llm.tokenize(open(text, "rb").read())
prompt, continuation = tokens[:600], tokens[600:617]
assert len(continuation) == 17

def logits(split):
    llm.reset()
    llm.eval(prompt)
    first, i = llm.n_tokens, 0
    for n in split:
        llm.eval(continuation[i:i + n])
        i += n
    return np.array(llm.scores[first:llm.n_tokens])

alone = logits([1] * 17)
np.save(out, alone)
print(json.dumps({k: float(np.abs(logits([k] + [1] * (17 - k)) - alone).max()) for k in (2, 4, 8, 17)}))
"""

TEXT = Path(awq2gguf.__file__).parent / "pipeline.py"  # any long text


def _decode(build, model, threads, out) -> dict[str, float]:
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(model), str(threads), str(TEXT), str(out)],
                          env=build.env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_patched_decodes_a_token_to_the_same_bits_alone_in_a_batch_and_at_any_thread_count(builds, smollm2_q4_0,
                                                                                           tmp_path):
    import numpy as np

    differences = _decode(builds["patched"], smollm2_q4_0, 2, tmp_path / "two.npy")
    assert differences == {"2": 0.0, "4": 0.0, "8": 0.0, "17": 0.0}
    _decode(builds["patched"], smollm2_q4_0, 1, tmp_path / "one.npy")
    assert np.array_equal(np.load(tmp_path / "one.npy"), np.load(tmp_path / "two.npy"))


def test_stock_is_the_control_its_batches_give_other_bits(builds, smollm2_q4_0, tmp_path):
    """The check above can fail: at the pin, a batch's rows take the whole cache in one pass while a
    lone token's is split over the threads, so stock's logits differ."""
    differences = _decode(builds["stock"], smollm2_q4_0, 2, tmp_path / "stock.npy")
    assert all(d > 0 for d in differences.values()), differences
