"""`bench awq`: ways of making an all-Q4_0 development model, made and measured against its FP16.

Variants: plain all-Q4_0, llama.cpp's imatrix all-Q4_0 and stock llama.cpp's IQ4_NL and Q4_K_M
with the same imatrix (the 4-bit files users compare with), awq2gguf with the calibration file (with
and without compensated rounding) and with self-sampled text (and with --untie-output when the
model ties its output matrix), optionally tuned (--tune-steps) and with given blocks dropped
(--drop-block-list, without and with tuning), the AutoAWQ engine and Intel's AutoRound when installed;
or (--quality-table) awq2gguf only as each --quality and --output-type makes it. The
calibration windows come from the second half of the evaluation text, which the perplexity windows
(at its start) never reach, and are written to one file that awq2gguf, AutoAWQ and llama-imatrix
all read (AutoRound: the same half as JSON lines), so every method sees the same text.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from ..builds import Build, get_build
from ..errors import tool_failure
from ..llama_quantize import quantize
from ..modes import OutputType, Quality
from ..options import Options
from . import autoround
from .eval_text import calibration_windows
from . import BenchError
from .peak_rss import run_with_peak_rss


@dataclass(frozen=True)
class Made:
    label: str
    path: Path
    seconds: float | None = None
    peak_rss: int | None = None
    stages: tuple[tuple[str, float], ...] = ()  # awq2gguf's: each finished stage and its seconds


# awq2gguf's line for each finished stage (progress.RichProgress), as rich prints it to a pipe.
_STAGE_DONE = re.compile(r"^done (.+) \((\d+(?:\.\d+)?) s\)$")
# The file calibration_file writes in a bench's output folder.
CALIBRATION_FILE = "calibration.txt"


def calibration_file(model_dir: Path, eval_text: Path, n_samples: int, n_tokens: int, out: Path,
                     n_held_out: int = Options.calib_held_out) -> Path:
    """n_samples + n_held_out (awq2gguf's final check) + 1 windows (one spare: re-tokenizing
    decoded text can lose a token or two) of eval_text's learning half, decoded into one file."""
    out.write_text("".join(calibration_windows(model_dir, eval_text, n_samples + n_held_out + 1, n_tokens)))
    return out


class ImatrixType(NamedTuple):
    """A 4-bit type users compare an all-Q4_0 file with, made with llama.cpp's imatrix."""
    label: str
    qtype: str
    build: str | None  # None: the bench's build
    args: tuple[str, ...] = ()  # more llama-quantize arguments


# Q4_0 by the bench's build, the others as stock llama.cpp makes them: its own mixtures (IQ4_NL
# keeps the output matrix in Q8_0), and IQ4_NL in every matrix, the all-Q4_0 file's size.
IMATRIX_TYPES = (ImatrixType("all-Q4_0 + llama.cpp imatrix", "Q4_0", None),
                 ImatrixType("stock IQ4_NL + imatrix", "IQ4_NL", "stock"),
                 ImatrixType("stock IQ4_NL --pure + imatrix", "IQ4_NL", "stock", ("--pure",)),
                 ImatrixType("stock Q4_K_M + imatrix", "Q4_K_M", "stock"))


def imatrix_variants(build: Build, f16: Path, calib: Path, n_samples: int, n_tokens: int, out_dir: Path,
                     threads: int) -> list[Made]:
    """One llama-imatrix over the calibration file, then each of IMATRIX_TYPES quantized with it
    (each timed as the imatrix plus its own quantization)."""
    start = time.monotonic()
    matrix = out_dir / "imatrix.gguf"
    build.run("llama-imatrix", ["-m", str(f16), "-f", str(calib), "-c", str(n_tokens),
                                "--chunks", str(n_samples), "-o", str(matrix), "-t", str(threads)])
    shared = time.monotonic() - start
    made = []
    for label, qtype, by, args in IMATRIX_TYPES:
        start = time.monotonic()
        out = quantize(get_build(by) if by else build, f16, out_dir / f"imatrix-{qtype}{''.join(args)}.gguf", qtype,
                       extra_args=("--imatrix", str(matrix), *args))
        made.append(Made(label, out, shared + time.monotonic() - start))
    matrix.unlink()
    return made


def awq2gguf(label: str, model_dir: Path, out: Path, args: list[str], build: Build) -> Made:
    """Run the awq2gguf command as a user would, timing it and taking its peak RSS (children included)."""
    cli = Path(sys.executable).with_name("awq2gguf")
    start = time.monotonic()
    # Wide enough that rich wraps no stage line.
    proc, peak = run_with_peak_rss([str(cli), str(model_dir), str(out), "--build", build.name, *args],
                                   env={**os.environ, "COLUMNS": "1000"})
    if proc.returncode != 0:
        raise tool_failure(f"awq2gguf ({label})", proc.returncode, proc.stderr, BenchError)
    stages = tuple((m[1], float(m[2])) for m in map(_STAGE_DONE.match, proc.stderr.splitlines()) if m)
    return Made(label, out, time.monotonic() - start, peak, stages)


def _ties_output(model_dir: Path) -> bool:
    return json.loads((model_dir / "config.json").read_text()).get("tie_word_embeddings", True)


def autoawq_available() -> bool:
    return importlib.util.find_spec("awq") is not None


@dataclass(frozen=True)
class Variants:
    """Which variants `make_variants` makes beside the plain, imatrix and default awq2gguf ones, and
    with how much calibration text."""
    n_samples: int
    n_tokens: int
    threads: int
    autoawq: bool
    seeds: tuple[int, ...] = (0,)  # one self-sampled variant per seed
    tune_steps: int = 0
    drop_list: tuple[int, ...] = ()
    autoround_iters: tuple[int, ...] = ()
    precisions: tuple[str, ...] = ("auto",)  # awq2gguf --precision of the calibration-file and self-sampled ones
    quality_table: bool = False  # the awq2gguf variants are only _quality_runs' (the README's --quality table)

    @property
    def first_precision(self) -> list[str]:
        return ["--precision", self.precisions[0]]

    def per_precision(self, label: str, name: str, args: list[str]) -> list[tuple[str, str, list[str]]]:
        """The variant once per precision, named after it where there are several."""
        if len(self.precisions) == 1:
            return [(label, name, [*args, *self.first_precision])]
        return [(f"{label}, --precision {p}", name.replace("-Q4_0", f"-{p}-Q4_0"), [*args, "--precision", p])
                for p in self.precisions]


def make_variants(build: Build, model_dir: Path, f16: Path, plain: Path, eval_text: Path, out_dir: Path,
                  variants: Variants, log=print) -> list[Made]:
    """Each method's file; the self-sampled variant once per seed, since which text the model happens
    to sample moves its perplexity more than the differences between methods. With tune_steps, the
    calibration-file and first-seed variants tuned too, whole and block-wise; with drop_list, the
    calibration-file variant with those blocks dropped, and (with tune_steps) dropped and tuned whole;
    per autoround_iters, AutoRound's gguf:q4_0 as it writes it and, where it keeps some matrices in
    another type, with those in Q4_0 too. The calibration-file and self-sampled variants are made
    in each of `precisions` (awq2gguf --precision), the others in the first."""
    out_dir.mkdir(parents=True, exist_ok=True)
    n_samples, n_tokens, threads = variants.n_samples, variants.n_tokens, variants.threads
    calib = calibration_file(model_dir, eval_text, n_samples, n_tokens, out_dir / CALIBRATION_FILE)
    size = ["--calib-tokens", str(n_tokens), "--threads", str(threads)]
    if variants.quality_table:
        runs = _quality_runs(calib)  # each --quality reads its own number of samples from the file
    else:
        runs = _awq2gguf_runs(variants, calib, _ties_output(model_dir))
        size = ["--calib-samples", str(n_samples), *size]
    made = [Made("all-Q4_0 (plain)", plain)]
    log("llama-imatrix + llama-quantize (Q4_0, and stock IQ4_NL and Q4_K_M)")
    made += imatrix_variants(build, f16, calib, n_samples, n_tokens, out_dir, threads)
    for label, name, args in runs:
        log(f"awq2gguf: {label}")
        made.append(awq2gguf(label, model_dir, out_dir / name, args + size, build))
    return made + _autoround_variants(build, model_dir, eval_text, out_dir, variants, log)


def _awq2gguf_runs(v: Variants, calib: Path, ties_output: bool) -> list[tuple[str, str, list[str]]]:
    """(label, file name, awq2gguf arguments) of each awq2gguf variant, in the order they are made."""
    first = v.first_precision
    runs = [*v.per_precision("awq2gguf, calibration file", "awq2gguf-file-Q4_0.gguf", ["--calib", str(calib)]),
            *(run for seed in v.seeds for run in v.per_precision(f"awq2gguf, self-sampled text, seed {seed}",
                                                                 f"awq2gguf-self-seed{seed}-Q4_0.gguf",
                                                                 ["--seed", str(seed)])),
            ("awq2gguf, calibration file, --no-compensate", "awq2gguf-file-nocomp-Q4_0.gguf",
             ["--calib", str(calib), "--no-compensate", *first]),
            *([("awq2gguf, calibration file, --untie-output", "awq2gguf-file-untied-Q4_0.gguf",
                ["--calib", str(calib), "--untie-output", *first])] if ties_output else [])]
    if v.tune_steps:
        for mode, what in (("model", ""), ("blocks", " block-wise")):
            tune = ["--tune-steps", str(v.tune_steps), "--tune-mode", mode, *first]
            runs += [(f"awq2gguf, calibration file, --tune-steps {v.tune_steps}{what}",
                      f"awq2gguf-file-tuned-{mode}-Q4_0.gguf", ["--calib", str(calib), *tune]),
                     (f"awq2gguf, self-sampled text, seed {v.seeds[0]}, --tune-steps {v.tune_steps}{what}",
                      f"awq2gguf-self-seed{v.seeds[0]}-tuned-{mode}-Q4_0.gguf", ["--seed", str(v.seeds[0]), *tune])]
    if v.drop_list:
        drop = ["--calib", str(calib), "--drop-block-list", ",".join(map(str, v.drop_list)), *first]
        runs.append((f"awq2gguf, calibration file, {len(v.drop_list)} blocks dropped",
                     "awq2gguf-file-drop-Q4_0.gguf", drop))
        if v.tune_steps:
            runs.append((f"awq2gguf, calibration file, {len(v.drop_list)} blocks dropped, --tune-steps {v.tune_steps}",
                         "awq2gguf-file-drop-tuned-Q4_0.gguf",
                         drop + ["--tune-steps", str(v.tune_steps), "--tune-mode", "model"]))
    if v.autoawq:
        runs.append(("AutoAWQ 0.2.9 engine, calibration file", "autoawq-file-Q4_0.gguf",
                     ["--calib", str(calib), "--engine", "autoawq"]))
    return runs


def _quality_runs(calib: Path) -> list[tuple[str, str, list[str]]]:
    """awq2gguf as a user runs it from a calibration file for the README's --quality table: each
    --quality with the output matrix in each --output-type, the calibration samples each quality's own."""
    return [(f"awq2gguf --quality {q}" + (f", --output-type {out}" if out != OutputType.Q4_0 else ""),
             f"awq2gguf-{q}-{out}.gguf", ["--calib", str(calib), "--quality", q, "--output-type", out])
            for q in Quality.values() for out in OutputType.values()]


def _autoround_variants(build: Build, model_dir: Path, eval_text: Path, out_dir: Path, v: Variants,
                        log) -> list[Made]:
    """Per --iters, AutoRound's file as written and, where it keeps some matrices in another type,
    with those put in Q4_0."""
    if not v.autoround_iters:
        return []
    made = []
    jsonl = autoround.calibration_jsonl(model_dir, eval_text, v.n_samples, v.n_tokens, out_dir / "calibration.jsonl")
    for iters in v.autoround_iters:
        label = f"AutoRound {autoround.VERSION} gguf:q4_0, --iters {iters}"
        log(label)
        written = out_dir / f"autoround-iters{iters}.gguf"
        seconds, peak = autoround.quantize_q4_0(model_dir, jsonl, v.n_samples, v.n_tokens, iters, written, v.threads)
        others = autoround.not_q4_0(written)
        made.append(Made(f"{label}{f' ({others})' if others else ''}", written, seconds, peak))
        if others:
            made.append(Made(f"{label}, {others} put in Q4_0",
                             autoround.at_q4_0(build, written, out_dir / f"autoround-iters{iters}-Q4_0.gguf")))
    return made


def measured_rows(made: list[Made], fp16_ppl: float, metrics) -> list[dict]:
    """Table rows: `metrics(path)` (PPL, KLD vs FP16) plus the share of plain all-Q4_0's
    perplexity gap to FP16 each method closes."""
    out = [dict(model=m.label, size_mib=m.path.stat().st_size / 2**20, make_s=m.seconds,
                peak_rss_mib=m.peak_rss / 2**20 if m.peak_rss else None, **metrics(m.path)) for m in made]
    plain = out[0]["ppl"]
    for r in out:
        r["gap_closed"] = (plain - r["ppl"]) / (plain - fp16_ppl)
    return out
