#!/usr/bin/env bash
# Build the peer ik_llama.cpp (llama-bench, llama-perplexity, llama-server, llama-batched-bench)
# into build/ik from a git clone the user has, at the commit vendor/ik-pin.env names.
# Usage: scripts/build-ik.sh IK_SRC [TARGET...]
# The same native flags as build.sh (AMX kept out), so the three builds differ only in their source.
# Its tools live under examples/ (LLAMA_BUILD_EXAMPLES=ON overrides the shared OFF). Its flash-attention
# kernels are compiled for F16/BF16/Q8_0 caches only (GGML_IQK_FA_ALL_QUANTS=OFF): the bench runs use
# an F16 cache, and the full set makes the longest of the three builds longer still.
set -euo pipefail
cd "$(dirname "$0")/.."
source vendor/ik-pin.env
if [ $# -lt 1 ]; then
    echo "usage: scripts/build-ik.sh IK_SRC [TARGET...]  (a clone of $IK_LLAMA_CPP_REPO)" >&2
    exit 2
fi
src=$1
shift
tag=build-ik
if ! head=$(git -C "$src" rev-parse HEAD 2>/dev/null); then
    echo "$tag: $src is not a git clone of ik_llama.cpp; clone $IK_LLAMA_CPP_REPO and check out $IK_LLAMA_CPP_COMMIT" >&2
    exit 1
fi
if [ "$head" != "$IK_LLAMA_CPP_COMMIT" ]; then
    echo "$tag: $src is at ${head:0:12}, but the comparison is pinned to ${IK_LLAMA_CPP_COMMIT:0:12}" \
         "(vendor/ik-pin.env): git -C $src checkout $IK_LLAMA_CPP_COMMIT" >&2
    exit 1
fi
jobs=${JOBS:-$(nproc)}
out=build/ik
source scripts/cmake-common.sh

targets=("$@")
[ $# -eq 0 ] && targets=(llama-bench llama-perplexity llama-server llama-batched-bench)
native=()
[ "$(uname -m)" = x86_64 ] && native=("-DCMAKE_C_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
                                      "-DCMAKE_CXX_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16")
# Its libraries beside its tools, as in our builds (the Build class and LD_LIBRARY_PATH look there).
configure_build_dir "$out" "ik-${head:0:12}" -DCMAKE_LIBRARY_OUTPUT_DIRECTORY="$(pwd)/$out/bin" \
    -DBUILD_SHARED_LIBS=ON -DGGML_NATIVE=ON -DGGML_OPENMP=ON -DGGML_IQK_FA_ALL_QUANTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_CURL=OFF "${native[@]}"
cmake --build "$out" --config Release -j "$jobs" --target "${targets[@]}"
echo "build-ik: $out/bin ready (ik_llama.cpp ${head:0:12})"
