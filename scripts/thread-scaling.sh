#!/usr/bin/env bash
# `bench decode` and `bench prefill` of the stock and the patched build on one all-Q4_0 file (the
# synthetic Qwen2.5-0.5B shape, quantized by the patched llama-quantize) at several thread counts:
# for hosts with more cores than the 2 the toolkit is developed on (users run it at 8).
# Usage: scripts/thread-scaling.sh OUT_DIR [THREADS...]   (default 8 16 4 2 1, the product's first)
# Writes OUT_DIR/{decode,prefill}-tN.json as each finishes, so a run cut short keeps what it did.
# BENCH (default .venv/bin/bench) and PYTHON (default .venv/bin/python) name the toolkit's entry
# points; REPS (default 3) the interleaved repetitions per build.
set -euo pipefail
cd "$(dirname "$0")/.."
out=$1
shift
threads=("$@")
[ $# -eq 0 ] && threads=(8 16 4 2 1)
bench=${BENCH:-.venv/bin/bench} python=${PYTHON:-.venv/bin/python} reps=${REPS:-3}
mkdir -p "$out"

model=$("$python" -c 'from awq2gguf.builds import get_build
from awq2gguf.bench.models import quantized_by, synthetic_f16
print(quantized_by(get_build("patched"), synthetic_f16("qwen2.5-0.5b"), "Q4_0"))' | tail -n 1)
echo "thread-scaling: $model, threads ${threads[*]}, $reps reps"
for t in "${threads[@]}"; do
    for kind in decode prefill; do
        $bench "$kind" --model "$model" --threads "$t" --reps "$reps" --json >"$out/$kind-t$t.json.tmp"
        mv "$out/$kind-t$t.json.tmp" "$out/$kind-t$t.json"
    done
done
