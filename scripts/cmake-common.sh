# Sourced by build.sh and build-arm.sh: checks the source tree, sets the cmake arguments both
# use and defines configure_once. ccache, when installed, makes a rebuild in a fresh clone on the
# same machine cheap.
# Expects $src and $tag (the script's name for messages).
if [ ! -f "$src/CMakeLists.txt" ]; then
    echo "$tag: $src has no llama.cpp source; run 'make vendor' first" >&2
    exit 1
fi
cmake_common=()
if command -v ccache >/dev/null; then
    export CCACHE_BASEDIR=$(pwd) CCACHE_NOHASHDIR=1
    cmake_common+=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
command -v ninja >/dev/null && cmake_common+=(-G Ninja)

# Configure build dir $1 (llama.cpp's commit label $2) with the flags every build shares plus the
# caller's; once only: later runs reuse its CMakeCache.txt.
configure_once() {
    local out=$1 commit=$2
    shift 2
    mkdir -p "$out"
    [ -f "$out/CMakeCache.txt" ] && return
    cmake -S "$src" -B "$out" "${cmake_common[@]}" \
        -DCMAKE_BUILD_TYPE=Release \
        -DLLAMA_OPENSSL=OFF \
        -DLLAMA_BUILD_TOOLS=ON \
        -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_SERVER=OFF \
        -DLLAMA_BUILD_APP=OFF \
        -DLLAMA_BUILD_NUMBER=0 \
        -DLLAMA_BUILD_COMMIT="$commit" \
        "$@" >"$out.configure.log" 2>&1 || { cat "$out.configure.log" >&2; exit 1; }
}
