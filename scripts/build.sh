#!/usr/bin/env bash
# Configure and build one llama.cpp source tree into build/NAME with the toolkit's flags.
# Usage: scripts/build.sh NAME SOURCE_DIR
# Both builds use the same flags, so stock vs patched differ only by the patch series.
set -euo pipefail
cd "$(dirname "$0")/.."
name=$1 src=$2
out=build/$name
jobs=${JOBS:-$(nproc)}

tag=build
source scripts/cmake-common.sh

targets=(llama ggml llama-completion llama-bench llama-quantize llama-perplexity llama-imatrix
         test-backend-ops test-quantize-fns test-export-graph-ops)

configure_once "$out" "$name" -DBUILD_SHARED_LIBS=ON -DGGML_NATIVE=ON -DGGML_OPENMP=ON -DLLAMA_BUILD_TESTS=ON
cmake --build "$out" --config Release -j "$jobs" --target "${targets[@]}"
echo "build: $out/bin ready ($name)"
