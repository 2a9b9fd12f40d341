"""`--quality best`: the settings measured best for the model's size, and about how long they take.

`fast` is the default job (AWQ, compensated rounding, 16 calibration samples, no tuning). `best` adds
block-wise tuning on more calibration text, sized so the job stays within hours on two cores
(bench/results/README.md, "Against the formats users pick"): the table below, by the model's weights.
Above 1B weights the AWQ search reads a quarter of the samples: it costs the small models about 5%
in KLD and takes the 1.5B job under 45 minutes (bench/results/README.md, "What the search's samples cost").
Up to 1B weights 128 steps per block beat 64 (the twins' KLD 5-12% lower, minutes more); above 4B 16
steps cost the twins no measurable KLD at that preset's 16 samples and take the 7B job's estimate to
about 94 minutes (bench/results/README.md, "More tuning steps below 1B", "Fewer tuning steps above 4B").
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .modes import Quality, TuneMode
from .options import Options


@dataclass(frozen=True)
class Preset:
    up_to: float  # weights in the model, at most
    calib_samples: int
    search_samples: int  # of them, the ones the AWQ search reads (spread evenly)
    tune_steps: int  # per block


BEST = (Preset(1.0e9, calib_samples=128, search_samples=128, tune_steps=128),
        Preset(4.0e9, calib_samples=128, search_samples=32, tune_steps=32),
        Preset(float("inf"), calib_samples=16, search_samples=16, tune_steps=16))
FAST_CALIB_SAMPLES = 16  # the default job's
MOST_SAMPLES = max(p.calib_samples for p in BEST)  # the most calibration samples a preset reads

# Seconds per weight of the decoder blocks, at 2 threads, as measured on the Qwen2.5-1.5B shape's
# block-wise job (bench awq-cost; bench/results/README.md): the AWQ search's part that does not
# depend on the samples and its part per calibration sample it reads (14 s per block at 16 samples,
# 68 s at 128), block-wise tuning (bf16) per step, and sampling the calibration text per weight of
# the whole model and token. They put the 7B job at 146 min where it took 150, and the 1.5B
# --quality best job from a file at 31 min where it took 39 on another host.
AWQ_FIXED = 1.35e-7
AWQ_PER_SAMPLE = 1.03e-8
TUNE_PER_STEP = 3.0e-8
SAMPLE_PER_TOKEN = 1.4e-11


def described() -> str:
    """BEST in words, for --help."""
    sizes = [f"up to {p.up_to / 1e9:g}B weights" if p.up_to != float("inf") else "above" for p in BEST]
    searched = [f" (the AWQ search on {p.search_samples})" if p.search_samples < p.calib_samples else "" for p in BEST]
    return ", ".join(f"{p.calib_samples} samples{s} and {p.tune_steps} steps per block {size}"
                     for p, s, size in zip(BEST, searched, sizes))


def preset(n_params: int) -> Preset:
    return next(p for p in BEST if n_params <= p.up_to)


def resolve(opts: Options, n_params: int) -> Options:
    """The job opts ask for on a model of n_params weights, its settings spelled out: with --quality
    best the preset's (a --calib-samples or --search-samples given is kept), with fast
    FAST_CALIB_SAMPLES unless given."""
    if opts.quality == Quality.FAST:
        return dataclasses.replace(opts, calib_samples=opts.calib_samples or FAST_CALIB_SAMPLES)
    p = preset(n_params)
    samples = opts.calib_samples or p.calib_samples
    search = opts.search_samples or min(p.search_samples, samples)
    return dataclasses.replace(opts, quality=Quality.FAST, calib_samples=samples, search_samples=search,
                               tune_steps=p.tune_steps, tune_mode=TuneMode.BLOCKS)


def searched(opts: Options) -> int:
    """The calibration samples the AWQ search reads, of a resolved job's (at most all of them)."""
    return min(opts.search_samples or opts.calib_samples, opts.calib_samples)


def expected_seconds(opts: Options, n_params: int, n_block_params: int) -> float:
    """About how long the AWQ search, the tuning and (without --calib) the sampling take."""
    seconds = n_block_params * (AWQ_FIXED + AWQ_PER_SAMPLE * searched(opts) + TUNE_PER_STEP * opts.tune_steps)
    if opts.calib is None:
        seconds += SAMPLE_PER_TOKEN * n_params * (opts.calib_samples + opts.calib_held_out) * opts.calib_tokens
    return seconds * 2 / opts.threads


def chosen(opts: Options, n_params: int, n_block_params: int) -> str:
    """What --quality best chose, and the time it should take, in one line."""
    minutes = expected_seconds(opts, n_params, n_block_params) / 60
    return (f"--quality best for {n_params / 1e9:.2g}B weights: --calib-samples {opts.calib_samples} "
            f"--search-samples {searched(opts)} --tune-steps {opts.tune_steps} --tune-mode {opts.tune_mode}; "
            f"expected about {minutes:.0f} min at {opts.threads} threads")
