#!/usr/bin/env bash
# 16-core host: stock, patched, ik and ik-rtr on the same all-Q4_0 files at 8, 16, 4, 2, 1 threads.
# Runs from the repo root of a device copy; .dev16/trees.tar.xz holds the three source trees (stock
# and patched vendored trees, ik_llama.cpp at vendor/ik-pin.env's commit), trimmed of docs, models
# and GPU backends. Each llama-bench call is `-p 512 -n 128 -r 1` (pp512 and tg128, each after its
# own warm-up) for one build; a round runs the four builds in turn, the order reversed every other
# round; each call's JSON goes to $OUT/bench.txt after a '### build shape threads round' line as it
# comes, so a run cut short keeps what it did. Tool logs stay in /tmp/logs, their tails in log.txt.
set -uo pipefail
cd "$(dirname "$0")/.."   # .dev16/run.sh: the repo root
out=${OUT:-/tmp/dev16-out}
mkdir -p "$out" /tmp/m /tmp/logs
start=$SECONDS
budget=${BUDGET:-500}   # seconds after which no new round starts
log() { echo "[$(date +%T) +$((SECONDS - start))s] $*" | tee -a "$out/log.txt"; }
{ nproc; lscpu; free -g; cc --version | head -n 1; } >"$out/host.txt" 2>&1

tar -xJf .dev16/trees.tar.xz -C .dev16
source vendor/ik-pin.env
(cd .dev16/ik && rm -rf .git && git init -q && echo "$IK_LLAMA_CPP_COMMIT" >.git/HEAD)
log "trees unpacked"

export JOBS=16
scripts/build.sh stock .dev16/stock llama-bench >/tmp/logs/build-stock.log 2>&1 &
scripts/build.sh patched .dev16/patched llama-bench llama-quantize >/tmp/logs/build-patched.log 2>&1 &
scripts/build-ik.sh .dev16/ik llama-bench >/tmp/logs/build-ik.log 2>&1 &
PYTHONPATH=py:.dev16/patched/gguf-py python3 - >/tmp/logs/synthetic.log 2>&1 <<'EOF' &
from pathlib import Path
import awq2gguf.assets.synthetic as s
s.QWEN2_VOCAB = Path(".dev16/patched/models/ggml-vocab-qwen2.gguf")
for name in ("qwen2.5-0.5b", "qwen2.5-1.5b"):
    s.write_synthetic_gguf(s.SHAPES[name], Path(f"/tmp/m/{name}-f16.gguf"))
    print(name, "written", flush=True)
EOF
wait
for f in /tmp/logs/*.log; do { echo "== $f"; tail -n 4 "$f"; } >>"$out/log.txt"; done
builds=(stock patched ik ik-rtr)
for b in stock patched ik; do
    [ -x build/$b/bin/llama-bench ] && continue
    log "build $b failed"
    tail -n 40 /tmp/logs/build-$b.log >>"$out/log.txt"
    [ $b = ik ] || exit 1
    builds=(stock patched)   # the peer is optional: ours still get measured
done
log "builds and f16 files ready"
for s in qwen2.5-0.5b qwen2.5-1.5b; do
    LD_LIBRARY_PATH=build/patched/bin build/patched/bin/llama-quantize /tmp/m/$s-f16.gguf /tmp/m/$s-Q4_0.gguf Q4_0 16 \
        >/tmp/logs/quantize-$s.log 2>&1 || { log "quantize $s failed"; tail -n 20 /tmp/logs/quantize-$s.log >>"$out/log.txt"; exit 1; }
    rm /tmp/m/$s-f16.gguf
done
ls -l /tmp/m >>"$out/log.txt"
log "all-Q4_0 files ready"

round() {  # shape threads round-number
    local s=$1 t=$2 r=$3 order=("${builds[@]}") b bin args
    ((r % 2 == 0)) && for ((i = ${#builds[@]} - 1; i >= 0; i--)); do order[${#builds[@]} - 1 - i]=${builds[i]}; done
    for b in "${order[@]}"; do
        bin=${b%-rtr} args=()
        [ "$b" = ik-rtr ] && args=(-rtr 1)
        LD_LIBRARY_PATH=build/$bin/bin build/$bin/bin/llama-bench "${args[@]}" -m /tmp/m/$s-Q4_0.gguf -t "$t" \
            -p 512 -n 128 -r 1 -o json >"$out/one.json" 2>>"$out/stderr.txt"
        { echo "### $b $s $t $r"; cat "$out/one.json"; } >>"$out/bench.txt"
    done
    rm -f "$out/one.json"
    log "$s t=$t round $r done"
}
plan=("qwen2.5-0.5b 8 3" "qwen2.5-0.5b 16 3" "qwen2.5-1.5b 8 3" "qwen2.5-1.5b 16 3"
      "qwen2.5-0.5b 4 3" "qwen2.5-0.5b 2 3" "qwen2.5-0.5b 1 2")
for p in "${plan[@]}"; do
    read -r s t n <<<"$p"
    for ((r = 1; r <= n; r++)); do
        if ((SECONDS - start > budget)); then log "budget spent: stopping before $s t=$t round $r"; exit 0; fi
        round "$s" "$t" "$r"
    done
done
log "all done"
