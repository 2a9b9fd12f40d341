#!/usr/bin/env bash
# Run a command as it would run on an AVX2-only x86 host (a Zen 3) on a machine with AVX-512: the
# C/C++ compilers turn -march=native into -march=znver3, and /proc/cpuinfo lists no AVX-512, AMX or
# AVX-VNNI flags, both for this command alone (its own mount namespace; needs root). What it checks:
# everything that compiles for the host (the llama.cpp builds, the native kernel tests) and every
# choice made from /proc/cpuinfo (kernel tests skipped or run, bf16 or FP32 training). What it does
# not: code that asks the CPU itself (torch's kernels) still runs AVX-512 where the CPU has it.
# Builds made under it land in build/ as usual, so use a separate clone; leaving it reconfigures
# them (their configure depends on the CPU flags).
# Usage: scripts/as-avx2-host.sh COMMAND [ARGS...]     e.g. scripts/as-avx2-host.sh make test
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 COMMAND [ARGS...]" >&2; exit 2; }

if [ "${AS_AVX2_HOST_DIR:-}" = "" ]; then
    [ "$(uname -m)" = x86_64 ] || { echo "$0: x86-64 hosts only" >&2; exit 1; }
    [ "$(id -u)" = 0 ] || { echo "$0: needs root (it bind-mounts over /proc/cpuinfo in its own namespace)" >&2; exit 1; }
    # A fixed folder per clone: a build dir configured under it keeps these compilers' paths.
    dir=$(cd "$(dirname "$0")/.." && pwd)/.cache/avx2-host
    mkdir -p "$dir/bin"
    sed -E '/^flags/{s/ (avx512[a-z0-9_]*|amx_[a-z0-9_]*|avx_vnni[a-z0-9_]*|avx_ifma|avx_ne_convert)\b//g}' \
        /proc/cpuinfo >"$dir/cpuinfo"
    for cc in cc c++ gcc g++; do
        real=$(command -v "$cc")
        cat >"$dir/bin/$cc" <<EOF
#!/usr/bin/env bash
args=()
for a in "\$@"; do
    case \$a in -march=native) a=-march=znver3 ;; -mtune=native) a=-mtune=znver3 ;; esac
    args+=("\$a")
done
exec $real "\${args[@]}"
EOF
        chmod +x "$dir/bin/$cc"
    done
    AS_AVX2_HOST_DIR=$dir exec unshare --mount --propagation private "$0" "$@"
fi

mount --bind "$AS_AVX2_HOST_DIR/cpuinfo" /proc/cpuinfo
PATH=$AS_AVX2_HOST_DIR/bin:$PATH exec "$@"
