# Sourced by build.sh and build-arm.sh: checks the source tree and sets the cmake arguments both
# use. ccache, when installed, makes a rebuild in a fresh clone on the same machine cheap.
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
