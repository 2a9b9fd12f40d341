#!/usr/bin/env bash
# Run an aarch64 program under qemu-user with a given SVE vector length, or as an A64FX.
# Usage: scripts/arm-run.sh BITS|a64fx PROGRAM [ARGS...]   (BITS: 128, 256, 512, 1024, 2048)
# Set ARM_INSN_COUNT=FILE to append the guest instruction count to FILE (bench arm).
set -euo pipefail
target=$1; shift
case $target in
    a64fx) cpu=a64fx,sve-default-vector-length=64 ;;
    128|256|512|1024|2048) cpu=max,sve-default-vector-length=$((target / 8)) ;;
    *) echo "arm-run: unknown target '$target' (128, 256, 512, 1024, 2048 or a64fx)" >&2; exit 2 ;;
esac
command -v qemu-aarch64 >/dev/null || { echo "arm-run: qemu-aarch64 not found: apt-get install qemu-user" >&2; exit 1; }
plugin=()
if [ -n "${ARM_INSN_COUNT:-}" ]; then
    plugin=(-plugin "${ARM_INSN_PLUGIN:?set ARM_INSN_PLUGIN to the built counting plugin}",outfile="$ARM_INSN_COUNT" -d plugin)
fi
exec qemu-aarch64 -L /usr/aarch64-linux-gnu -cpu "$cpu" "${plugin[@]}" "$@"
