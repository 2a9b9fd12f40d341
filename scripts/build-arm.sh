#!/usr/bin/env bash
# Cross-compile one llama.cpp source tree for aarch64 into build/arm-VARIANT-NAME (static, for
# qemu-aarch64), with only the targets the ARM checks use, plus our kernel tests.
# Usage: scripts/build-arm.sh NAME SOURCE_DIR VARIANT
#   VARIANT sve:   armv8.6-a+sve (i8mm and dotprod included): Neoverse N2 / YiTian 710, Graviton3
#   VARIANT a64fx: armv8.2-a+sve+fp16, no i8mm, no dotprod:   A64FX
# The vector length is not fixed at build time: the binaries run at any SVE length, which
# qemu-aarch64 -cpu max,sve-default-vector-length=N picks (scripts/arm-run.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
name=$1 src=$2 variant=$3
out=build/arm-$variant-$name
jobs=${JOBS:-$(nproc)}

case $variant in
    sve)   march=armv8.6-a+sve ;;
    a64fx) march=armv8.2-a+sve+fp16 ;;
    *) echo "build-arm: unknown variant '$variant' (sve or a64fx)" >&2; exit 2 ;;
esac
for tool in aarch64-linux-gnu-gcc aarch64-linux-gnu-g++; do
    command -v $tool >/dev/null || { echo "build-arm: $tool not found: apt-get install gcc-aarch64-linux-gnu g++-aarch64-linux-gnu" >&2; exit 1; }
done
tag=build-arm
source scripts/cmake-common.sh

# OpenMP off: ggml's own thread pool links statically without a cross libgomp, and the checks
# run single-threaded anyway (instruction counts need it).
args=(-DCMAKE_SYSTEM_NAME=Linux -DCMAKE_SYSTEM_PROCESSOR=aarch64
      -DCMAKE_C_COMPILER=aarch64-linux-gnu-gcc -DCMAKE_CXX_COMPILER=aarch64-linux-gnu-g++
      -DBUILD_SHARED_LIBS=OFF -DCMAKE_EXE_LINKER_FLAGS=-static
      -DGGML_NATIVE=OFF -DGGML_CPU_ARM_ARCH="$march" -DGGML_OPENMP=OFF -DGGML_LLAMAFILE=OFF
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF)
configure_build_dir "$out" "arm-$variant-$name" "${args[@]}"
# The end-to-end check (llama-perplexity under QEMU) runs on the sve variant only.
targets=(ggml)
[ "$variant" = sve ] && targets+=(llama-perplexity)
cmake --build "$out" --config Release -j "$jobs" --target "${targets[@]}"
# Our kernel tests and the bench arm workload, against this build's static ggml.
build_native "$out" "${args[@]}"
echo "build-arm: $out/bin ready ($name, $variant)"
