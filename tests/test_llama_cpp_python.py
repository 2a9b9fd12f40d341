"""llama-cpp-python (installed with -DLLAMA_BUILD=OFF) runs on each build's libllama.so."""

import json
import subprocess
import sys

from awq2gguf.assets.synthetic import SHAPES

SCRIPT = r"""
import json, sys
from llama_cpp import Llama
llm = Llama(model_path=sys.argv[1], n_ctx=128, n_threads=2, seed=1, verbose=False)
tokens = []
for t in llm.generate(llm.tokenize(b"The quick brown fox"), temp=0.0):
    tokens.append(t)
    if len(tokens) == 8:
        break
maps = open("/proc/self/maps").read().splitlines()
libs = sorted({l.split()[-1] for l in maps if "libllama.so" in l})
print(json.dumps({"tokens": tokens, "libs": libs, "text": llm.detokenize(tokens).decode(errors="replace")}))
"""


def test_llama_cpp_python_generates_with_each_build(build, tiny_q4_0):
    model = tiny_q4_0[("tiny-tied", build.name)]
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(model)], env=build.env(),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert len(result["tokens"]) == 8
    assert all(0 <= t < SHAPES["tiny-tied"].n_vocab for t in result["tokens"])
    # The library really came from this build, not from anywhere else on the system.
    assert result["libs"] and all(lib.startswith(str(build.lib_dir)) for lib in result["libs"]), result["libs"]


def test_missing_build_names_its_make_target(tmp_path, monkeypatch):
    env = {"AWQ2GGUF_ROOT": str(tmp_path), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-c", "from awq2gguf.builds import get_build; get_build('patched')"],
                          env=env, capture_output=True, text=True)
    assert proc.returncode != 0
    assert "run `make patched-build`" in proc.stderr
