#!/usr/bin/env bash
# Put branch `awq2gguf` of vendor/llama.cpp at `base` + patches/*.patch (git am -3, in order).
# Only files the series touches get new mtimes, so the following build is incremental.
# Skips all work when the branch already matches the series it was last built from.
set -euo pipefail
cd "$(dirname "$0")/.."
src=vendor/llama.cpp
stamp=$src/.git/awq2gguf-series
git_() { git -C "$src" "$@"; }

git_ rev-parse --verify -q base >/dev/null || { echo "patches: no vendor tree; run 'make vendor' first" >&2; exit 1; }

shopt -s nullglob
series=(patches/*.patch)
series_id=$(cat /dev/null "${series[@]}" | sha256sum | cut -d' ' -f1)
head_now=$(git_ rev-parse HEAD)

if [ -n "$(git_ status --porcelain)" ]; then
    echo "patches: ERROR: $src has uncommitted changes." >&2
    echo "  Commit them in $src and run 'make patches-export', or discard them with" >&2
    echo "  'git -C $src checkout -- . && git -C $src clean -fd'." >&2
    exit 1
fi
if [ -f "$stamp" ]; then
    read -r stamped_series stamped_head <"$stamp"
    if [ "$stamped_series" = "$series_id" ] && [ "$stamped_head" = "$head_now" ]; then
        echo "patches: $src is at base + ${#series[@]} patch(es), up to date"
        exit 0
    fi
    if [ "$stamped_head" != "$head_now" ] && [ "$stamped_series" = "$series_id" ]; then
        echo "patches: ERROR: $src has commits that are not in patches/." >&2
        echo "  Run 'make patches-export' to keep them, or 'make patches-reset' to drop them." >&2
        exit 1
    fi
fi

git_ checkout -q -B awq2gguf base
for p in "${series[@]}"; do
    if ! git_ am -q -3 --committer-date-is-author-date "$(pwd)/$p" >/dev/null 2>"$src/.git/am.log"; then
        cat "$src/.git/am.log" >&2
        git_ am --abort >/dev/null 2>&1 || true
        git_ checkout -q awq2gguf
        echo >&2
        echo "patches: ERROR: $p does not apply onto base + the patches before it." >&2
        echo "  To resolve: cd $src && git am -3 $(pwd)/$p, fix the conflict, 'git add' the files," >&2
        echo "  'git am --continue', apply the remaining patches, then 'make patches-export'." >&2
        exit 1
    fi
    echo "patches: applied $p"
done
echo "$series_id $(git_ rev-parse HEAD)" >"$stamp"
