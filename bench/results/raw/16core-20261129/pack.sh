#!/usr/bin/env bash
# Packs the three source trees run.sh builds into .dev16/trees.tar.xz (15 MiB; the device tool carries
# at most 64 MiB): the vendored stock and patched trees and an ik_llama.cpp clone at vendor/ik-pin.env's
# commit (IK_SRC), without .git, docs, models (but the Qwen2 vocabulary the synthetic files take),
# GPU backends and media. Run from the repo root; then `device run` with carry [".dev16"]:
# `BUDGET=470 bash .dev16/run.sh` (a second call on the warm machine can run more rounds: see log.txt).
set -euo pipefail
ik=${IK_SRC:?set IK_SRC to an ik_llama.cpp clone}
rm -rf .dev16 && mkdir -p .dev16 && cp "$(dirname "$0")/run.sh" .dev16/
copy() { mkdir -p "$2" && (cd "$1" && tar --exclude=./.git -cf - .) | (cd "$2" && tar -xf -); }
copy vendor/llama.cpp .dev16/patched
copy vendor/llama.cpp-stock .dev16/stock
copy "$ik" .dev16/ik
for t in patched stock; do
    d=.dev16/$t
    rm -rf "$d/docs" "$d/media" "$d/benches"
    find "$d/models" -type f ! -name ggml-vocab-qwen2.gguf -delete
    for b in cuda et metal hexagon sycl vulkan opencl cann musa hip openvino virtgpu webgpu zdnn zendnn blas; do
        rm -rf "$d/ggml/src/ggml-$b"
    done
done
d=.dev16/ik
rm -rf $d/docs $d/media $d/github-data $d/models $d/ggml/src/ggml-cuda $d/ggml/src/ggml-cuda.cu \
    $d/ggml/src/vulkan-shaders $d/ggml/src/ggml-sycl $d/ggml/src/ggml-cann $d/examples/llama.android $d/ci $d/docker
find .dev16 \( -name '*.mp4' -o -name '*.webp' -o -name '*.png' -o -name '*.gz' -o -name '*.jpg' \) -delete
(cd .dev16 && tar -cf - patched stock ik | xz -T0 -6 >trees.tar.xz && rm -rf patched stock ik)
grep -qxF '/.dev16/' .git/info/exclude 2>/dev/null || echo '/.dev16/' >>.git/info/exclude
ls -l .dev16
