"""Where one decoder block's AWQ time goes, at a real model's shape (random weights).

    python scripts/profile-awq-block.py qwen2.5-7b [--precision fp32|bf16] [--ops]

Builds one random decoder block of the shape (assets/synthetic.SHAPES), feeds it 16 x 256 random
hidden states, runs the search, rounding and checks as awq2gguf does for each block
(awq.apply._choose_block) and the next block's input, and prints the seconds of each part and the
process's peak RSS while it ran; --ops adds torch's profile of the ops that took the time. A
7B-shaped block needs about 6.3 GiB.
"""

from __future__ import annotations

import argparse
import functools
import os
import threading
import time
from contextlib import nullcontext

import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from awq2gguf.assets.synthetic import SHAPES
from awq2gguf.awq import apply, forward, search
from awq2gguf.awq.layout import layout_of
from awq2gguf.host import physical_cores, resolve_precision
from awq2gguf.modes import Precision

PARTS = {"capture": "_input_stats", "search": "search_scales", "compensate": "_compensated", "clip": "search_clip"}


class PeakRss:
    """This process's largest RSS while each part ran (`part`: the one running now), sampled every
    20 ms and at the end of each part (which may be shorter)."""

    def __init__(self):
        self.part, self.peaks = "other", {}
        self.sample()  # the watcher may first run after a short part has begun: "other" is sampled once here
        threading.Thread(target=self._watch, daemon=True).start()

    def sample(self) -> None:
        with open("/proc/self/statm") as f:
            rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        self.peaks[self.part] = max(self.peaks.get(self.part, 0), rss)

    def _watch(self) -> None:
        while True:
            self.sample()
            time.sleep(0.02)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("shape", choices=sorted(SHAPES))
    parser.add_argument("--precision", choices=Precision.values(), default=Precision.AUTO.value)
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--ops", action="store_true", help="also torch.profiler's table of the ops")
    args = parser.parse_args()
    torch.set_num_threads(physical_cores())
    torch.manual_seed(0)
    shape = SHAPES[args.shape]
    config = Qwen2Config(hidden_size=shape.n_embd, intermediate_size=shape.n_ff, num_attention_heads=shape.n_head,
                         num_key_value_heads=shape.n_head_kv, num_hidden_layers=1, vocab_size=1024,
                         rope_theta=shape.rope_theta, rms_norm_eps=shape.rms_eps, attn_implementation="sdpa")
    model = Qwen2ForCausalLM(config).eval()
    with torch.no_grad():
        x, kwargs = forward.first_block_input(model, torch.randint(0, 1024, (args.samples, args.tokens)))
    x = torch.randn_like(x)
    precision = resolve_precision(args.precision)
    products = forward.PRODUCTS[precision]

    seconds: dict[str, float] = {}
    rss = PeakRss()

    def timed(part, f):
        @functools.wraps(f)
        def wrapper(*a, **k):
            started, outer, rss.part = time.perf_counter(), rss.part, part
            try:
                return f(*a, **k)
            finally:
                seconds[part] = seconds.get(part, 0.0) + time.perf_counter() - started
                rss.sample()
                rss.part = outer
        return wrapper

    for part, name in PARTS.items():
        setattr(apply, name, timed(part, getattr(apply, name)))
    apply._Block.error = timed("block checks", apply._Block.error)
    layer = model.model.layers[0]
    started = time.perf_counter()
    with torch.no_grad(), torch.profiler.profile() if args.ops else nullcontext() as profile:
        apply._choose_block(layer, layout_of(model), x, kwargs, search.DEFAULT_GRID, True, True, 0, 4, products)
        timed("next input", forward.run_fake_quantized)(layer, x, kwargs, products)
    total = time.perf_counter() - started
    print(f"{args.shape} block, {args.samples} x {args.tokens} tokens, {precision} products, "
          f"{torch.get_num_threads()} threads: {total:.2f} s")
    seconds["other"] = total - sum(seconds.values())
    for part, s in seconds.items():
        print(f"  {part:<14} {s:7.2f} s   peak RSS {rss.peaks.get(part, 0) / 2**30:5.2f} GiB")
    if args.ops:
        print(profile.key_averages().table(sort_by="self_cpu_time_total", row_limit=20))


if __name__ == "__main__":
    main()
