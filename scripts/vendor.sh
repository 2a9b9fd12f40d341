#!/usr/bin/env bash
# Fetch the pinned llama-cpp-python sdist (kept in vendor/.cache, also the source of the Python
# binding), verify its sha256 on every run, and on first run turn its vendored llama.cpp into a
# git work tree: branch `base` holds the pristine pin in one commit, and a detached worktree of
# `base` (vendor/llama.cpp-stock) is the source of the stock build.
set -euo pipefail
cd "$(dirname "$0")/.."
source vendor/pin.env

src=vendor/llama.cpp
stock=vendor/llama.cpp-stock
cache=vendor/.cache
sdist="$cache/llama_cpp_python-${LLAMA_CPP_PYTHON_VERSION}.tar.gz"

mkdir -p "$cache"
if [ ! -f "$sdist" ]; then
    echo "vendor: downloading the llama-cpp-python==${LLAMA_CPP_PYTHON_VERSION} sdist from PyPI"
    python3 -m pip download --quiet --no-deps --no-binary :all: \
        "llama-cpp-python==${LLAMA_CPP_PYTHON_VERSION}" -d "$cache"
fi

actual=$(sha256sum "$sdist" | cut -d' ' -f1)
if [ "$actual" != "$LLAMA_CPP_PYTHON_SDIST_SHA256" ]; then
    echo "vendor: ERROR: sha256 mismatch for $sdist" >&2
    echo "  expected (vendor/pin.env): $LLAMA_CPP_PYTHON_SDIST_SHA256" >&2
    echo "  actual:                    $actual" >&2
    echo "  The download is not the pinned release. Delete $cache and retry; if PyPI really" >&2
    echo "  changed the file, review the new sdist before updating vendor/pin.env." >&2
    exit 1
fi

if git -C "$src" rev-parse --verify -q base >/dev/null 2>&1 && [ -d "$stock" ]; then
    echo "vendor: $src holds the verified pin (llama-cpp-python ${LLAMA_CPP_PYTHON_VERSION}, branch base)"
    exit 0
fi

rm -rf "$src" "$stock"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tar -xzf "$sdist" -C "$tmp" "llama_cpp_python-${LLAMA_CPP_PYTHON_VERSION}/vendor/llama.cpp"
mv "$tmp/llama_cpp_python-${LLAMA_CPP_PYTHON_VERSION}/vendor/llama.cpp" "$src"
# The sdist keeps the submodule's .git pointer file; it points nowhere here.
rm -f "$src/.git"

# A fixed identity and date make the base commit's id the same on every machine.
export GIT_AUTHOR_NAME=awq2gguf GIT_AUTHOR_EMAIL=awq2gguf@localhost
export GIT_COMMITTER_NAME=awq2gguf GIT_COMMITTER_EMAIL=awq2gguf@localhost
export GIT_AUTHOR_DATE="2000-01-01T00:00:00Z" GIT_COMMITTER_DATE="2000-01-01T00:00:00Z"
git -C "$src" init -q -b base
git -C "$src" config user.name awq2gguf
git -C "$src" config user.email awq2gguf@localhost
git -C "$src" config core.autocrlf false
# The sdist's own .gitignore files would hide some of its files from the base commit.
git -C "$src" add -A -f .
git -C "$src" commit -q -m "llama.cpp as vendored in llama-cpp-python ${LLAMA_CPP_PYTHON_VERSION}"
git -C "$src" worktree add -q --detach "$(pwd)/$stock" base
echo "vendor: $src is at base $(git -C "$src" rev-parse --short base); stock source in $stock"
