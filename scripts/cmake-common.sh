# Sourced by build.sh and build-arm.sh: checks the source tree, sets the cmake arguments both
# use and defines configure_build_dir. ccache, when installed, makes a rebuild in a fresh clone on the
# same machine cheap.
# Expects $src, $tag (the script's name for messages) and $jobs.
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
# caller's. A build dir is reconfigured from scratch when what its configure depended on changes
# (the arguments, the compilers, the CPU a native build targets), so a changed flag or a build dir
# carried to a machine with other CPU features never keeps stale settings; else its cache is reused.
configure_build_dir() {
    local out=$1 commit=$2
    shift 2
    local args=("${cmake_common[@]}" -DCMAKE_BUILD_TYPE=Release -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TOOLS=ON
                -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_NUMBER=0
                -DLLAMA_BUILD_COMMIT="$commit" "$@")
    local stamp="$out/awq2gguf-configure.txt" want
    want=$(configure_inputs "${args[@]}")
    if [ -f "$out/CMakeCache.txt" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
        return
    fi
    if [ -f "$out/CMakeCache.txt" ]; then
        echo "$tag: $out was configured with other flags, compilers or CPU features: reconfiguring" >&2
        rm -rf "$out/CMakeCache.txt" "$out/CMakeFiles"
    fi
    mkdir -p "$out"
    cmake -S "$src" -B "$out" "${args[@]}" >"$out.configure.log" 2>&1 || { cat "$out.configure.log" >&2; exit 1; }
    printf '%s\n' "$want" >"$stamp"
}

# The toolkit's own C/C++ programs (native/CMakeLists.txt: kernel tests, bench helpers) against
# the tree just built in $1, configured with that tree's arguments (the rest) so they are compiled
# the way it was; they land in its bin/.
build_native() {
    local out=$1 tree_src
    shift
    tree_src=$(realpath "$src")
    src=native configure_build_dir "$out/native" native "$@" -DLLAMA_SRC="$tree_src" -DLLAMA_BUILD="$(realpath "$out")"
    cmake --build "$out/native" -j "$jobs"
}

# What a configure depends on: its arguments, the compilers they name (or cc/c++) with their
# versions, and for a native build the host's CPU flags (they decide what -march=native turns on).
configure_inputs() {
    local cc=cc cxx=c++ a
    for a in "$@"; do
        case $a in
            -DCMAKE_C_COMPILER=*) cc=${a#*=} ;;
            -DCMAKE_CXX_COMPILER=*) cxx=${a#*=} ;;
        esac
    done
    printf 'arg %s\n' "$@"
    echo "cc $("$cc" --version | head -n 1)"
    echo "cxx $("$cxx" --version | head -n 1)"
    case " $* " in
        *" -DGGML_NATIVE=ON "*) echo "cpu $(grep -m 1 '^flags' /proc/cpuinfo | cut -d: -f2 | xargs -n 1 | LC_ALL=C sort | xargs)" ;;
    esac
}
