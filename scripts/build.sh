#!/usr/bin/env bash
# Configure and build one llama.cpp source tree into build/NAME with the toolkit's flags.
# Usage: scripts/build.sh NAME SOURCE_DIR [TARGET...]
# Both builds use the same flags, so stock vs patched differ only by the patch series. Named
# targets build only those (e.g. llama-bench on a borrowed machine); by default everything the
# toolkit runs, and its native programs.
set -euo pipefail
cd "$(dirname "$0")/.."
name=$1 src=$2
shift 2
out=build/$name
jobs=${JOBS:-$(nproc)}

tag=build
source scripts/cmake-common.sh

targets=("$@")
[ $# -eq 0 ] && targets=(llama ggml llama-completion llama-bench llama-batched-bench llama-quantize llama-perplexity
                         llama-imatrix llama-server llama-embedding ggml-rpc-server test-backend-ops test-quantize-fns
                         test-export-graph-ops)

# AMX stays out of both builds: at the pin, ggml's AMX kernels take the Q4_0 weights on an Intel
# CPU that has it, and GCC 12 drops the stores that fill their tile configuration, so the first
# prefill dies of SIGILL (tileloadd on unconfigured tiles; decode, which does not use tiles, runs).
# Explicit -mno-* flags win over -march=native in either order.
native=()
[ "$(uname -m)" = x86_64 ] && native=("-DCMAKE_C_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
                                      "-DCMAKE_CXX_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16")
# llama-server (awq2gguf-serve's engine) without its web UI: the UI would be fetched from the network
# or built with npm, and awq2gguf-serve has its own chat page. The RPC backend and ggml-rpc-server
# split a model's layers over machines (awq2gguf-serve --rpc). The examples for llama-embedding alone,
# llama.cpp's own embeddings that the tests hold /v1/embeddings to.
args=(-DBUILD_SHARED_LIBS=ON -DGGML_NATIVE=ON -DGGML_OPENMP=ON -DLLAMA_BUILD_TESTS=ON -DGGML_RPC=ON
      -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_EXAMPLES=ON
      "${native[@]}")
configure_build_dir "$out" "$name" "${args[@]}"
cmake --build "$out" --config Release -j "$jobs" --target "${targets[@]}"
if [ $# -eq 0 ]; then build_native "$out" "${args[@]}"; fi
echo "build: $out/bin ready ($name)"
