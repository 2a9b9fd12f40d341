#!/usr/bin/env bash
# Regenerate patches/ (or OUT_DIR) from the commits on top of `base` in vendor/llama.cpp.
# Usage: scripts/export-patches.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
src=vendor/llama.cpp
out=${1:-patches}
git -C "$src" rev-parse --verify -q base >/dev/null || { echo "patches: no vendor tree; run 'make vendor' first" >&2; exit 1; }
if [ -n "$(git -C "$src" status --porcelain)" ]; then
    echo "patches: ERROR: $src has uncommitted changes; commit them first." >&2
    exit 1
fi
mkdir -p "$out"
rm -f "$out"/*.patch
# -N: every subject stays "[PATCH]", so adding a patch does not rewrite the ones before it.
git -C "$src" format-patch -q -N --zero-commit --no-signature --no-stat --full-index \
    -o "$(cd "$out" && pwd)" base..HEAD
if [ "$out" = patches ]; then
    # Record that the work tree and the series agree, so the next build does not re-apply.
    shopt -s nullglob
    series=(patches/*.patch)
    echo "$(cat /dev/null "${series[@]}" | sha256sum | cut -d' ' -f1) $(git -C "$src" rev-parse HEAD)" \
        >"$src/.git/awq2gguf-series"
fi
ls "$out"
