"""The 16-core table from bench.txt: blocks of '### build shape threads round' and llama-bench's JSON.
Per shape, threads and test: each build's median tokens/s over the rounds, and patched / stock and
patched / the faster ik mode (by median), as the median of the per-round ratios (min-max)."""
import json
import statistics as st
import sys
from collections import defaultdict

runs = defaultdict(dict)  # (shape, threads, test) -> {(build, round): tokens/s}
for path in sys.argv[1:] or ["bench.txt"]:
    for part in open(path).read().split("### ")[1:]:
        head, body = part.split("\n", 1)
        build, shape, threads, rnd = head.split()
        for d in json.loads(body):
            test = "pp512" if d["n_prompt"] else "tg128"
            runs[(shape, int(threads), test)][(build, int(rnd))] = d["avg_ts"]


def ratio(key, other):
    r = runs[key]
    q = [r[("patched", n)] / r[(other, n)] for b, n in r if b == "patched"]
    return f"{st.median(q):.2f} ({min(q):.2f}-{max(q):.2f})"


print("| shape | threads | test | stock | patched | ik | ik-rtr | patched/stock | patched/faster ik |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for key in sorted(runs, key=lambda k: (k[0], k[2] == "pp512", k[1])):
    med = {b: st.median(v for (bb, _), v in runs[key].items() if bb == b) for b in ("stock", "patched", "ik", "ik-rtr")}
    ik = max(("ik", "ik-rtr"), key=med.get)
    n = len({n for _, n in runs[key]})
    print(f"| {key[0]} | {key[1]} | {key[2]} ({n} rounds) | {med['stock']:.1f} | **{med['patched']:.1f}** | {med['ik']:.1f}"
          f" | {med['ik-rtr']:.1f} | {ratio(key, 'stock')} | **{ratio(key, ik)}** {ik} |")
