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

mkdir -p "$out"
if [ ! -f "$out/CMakeCache.txt" ]; then
    cmake -S "$src" -B "$out" "${cmake_common[@]}" \
        -DCMAKE_BUILD_TYPE=Release \
        -DBUILD_SHARED_LIBS=ON \
        -DGGML_NATIVE=ON \
        -DGGML_OPENMP=ON \
        -DLLAMA_OPENSSL=OFF \
        -DLLAMA_BUILD_TESTS=ON \
        -DLLAMA_BUILD_TOOLS=ON \
        -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_SERVER=OFF \
        -DLLAMA_BUILD_APP=OFF \
        -DLLAMA_BUILD_NUMBER=0 \
        -DLLAMA_BUILD_COMMIT="$name" \
        >"$out.configure.log" 2>&1 || { cat "$out.configure.log" >&2; exit 1; }
fi
cmake --build "$out" --config Release -j "$jobs" --target "${targets[@]}"
echo "build: $out/bin ready ($name)"
