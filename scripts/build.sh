#!/usr/bin/env bash
# Configure and build one llama.cpp source tree into build/NAME with the toolkit's flags.
# Usage: scripts/build.sh NAME SOURCE_DIR
# Both builds use the same flags, so stock vs patched differ only by the patch series.
# ccache, when installed, makes a rebuild in a fresh clone on the same machine cheap.
set -euo pipefail
cd "$(dirname "$0")/.."
name=$1 src=$2
out=build/$name
jobs=${JOBS:-$(nproc)}

if [ ! -f "$src/CMakeLists.txt" ]; then
    echo "build: $src has no llama.cpp source; run 'make vendor' first" >&2
    exit 1
fi

targets=(llama ggml llama-completion llama-bench llama-quantize llama-perplexity llama-imatrix
         test-backend-ops test-quantize-fns test-export-graph-ops)

launcher=()
if command -v ccache >/dev/null; then
    export CCACHE_BASEDIR=$(pwd) CCACHE_NOHASHDIR=1
    launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)

mkdir -p "$out"
if [ ! -f "$out/CMakeCache.txt" ]; then
    cmake -S "$src" -B "$out" "${generator[@]}" "${launcher[@]}" \
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
