"""awq2gguf's main job: HF folder -> calibration -> AWQ search -> folded FP weights -> GGUF -> quantized GGUF.

Everything in between lives in a work folder beside OUT (same file system, so the final rename
is atomic) that is removed at the end, whatever happens: OUT appears complete or not at all.
"""

from __future__ import annotations

import gc
import shutil
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, ContextManager, Protocol

from . import __version__, calibration, checkpoint
from .awq.search import DEFAULT_GRID
from .builds import get_build
from .convert import convert_hf_to_gguf
from .q4_0 import BLOCK
from .quantize import quantize

QTYPES = ("Q4_0", "Q8_0", "Q4_K_M", "F16")
ENGINES = ("awq2gguf", "autoawq")


@dataclass(frozen=True)
class Options:
    qtype: str = "Q4_0"
    calib: Path | None = None  # None: the model samples its own calibration text
    calib_samples: int = 16
    calib_tokens: int = 256
    clip: bool = True
    untie_output: bool = False
    grid: tuple[float, ...] = DEFAULT_GRID
    engine: str = "awq2gguf"
    build: str = "patched"
    threads: int = 2
    seed: int = 0


@dataclass
class Summary:
    out: Path
    calibration: str = ""
    seconds: dict[str, float] = field(default_factory=dict)
    mean_alpha: float | None = None
    error_ratio: float | None = None  # AWQ output error / plain Q4_0 output error, summed over groups


class Progress(Protocol):
    def stage(self, description: str, total: int | None = None) -> ContextManager[Callable[[int], None]]:
        """A stage of the job; the context yields a callback taking the number of steps done."""


class NoProgress:
    @contextmanager
    def stage(self, description, total=None):
        yield lambda done: None


def provenance(opts: Options, calib: calibration.Calibration) -> dict[str, str]:
    """GGUF metadata (llama-quantize --override-kv) saying how the file was made."""
    grid = f"{opts.grid[0]:g}..{opts.grid[-1]:g} ({len(opts.grid)} points)"
    return {
        "awq2gguf.version": f"str:{__version__}",
        "awq2gguf.engine": f"str:{opts.engine}",
        "awq2gguf.calibration.source": f"str:{calib.source[:120]}",
        "awq2gguf.calibration.samples": f"int:{calib.n_samples}",
        "awq2gguf.calibration.tokens": f"int:{calib.n_tokens}",
        "awq2gguf.alpha_grid": f"str:{grid}",
        "awq2gguf.group_size": f"int:{BLOCK}",
        "awq2gguf.clip": f"bool:{str(opts.clip).lower()}",
        "awq2gguf.untie_output": f"bool:{str(opts.untie_output).lower()}",
    }


def _calibrate(model_dir: Path, tokenizer, opts: Options, work: Path, progress: Progress) -> calibration.Calibration:
    if opts.calib is not None:
        with progress.stage(f"calibration text from {opts.calib.name}"):
            return calibration.from_file(tokenizer, opts.calib, opts.calib_samples, opts.calib_tokens)
    with progress.stage("FP16 GGUF for sampling calibration text"):
        f16 = convert_hf_to_gguf(model_dir, work / "source-f16.gguf", "f16")
    try:
        with progress.stage(f"sampling {opts.calib_samples} x {opts.calib_tokens} calibration tokens",
                            opts.calib_tokens) as done:
            return calibration.generated(get_build(opts.build), f16, opts.calib_samples, opts.calib_tokens,
                                         opts.seed, opts.threads, on_step=lambda d, _total: done(d))
    finally:
        f16.unlink(missing_ok=True)


def _awq(model_dir: Path, calib: calibration.Calibration, opts: Options, work: Path,
         progress: Progress, summary: Summary) -> Path:
    from .awq.apply import apply_awq

    with progress.stage("loading the FP model"):
        model = checkpoint.load_model(model_dir)
    if opts.untie_output:
        checkpoint.untie_output(model)
    n_layers = len(model.model.layers)
    with progress.stage("AWQ search, block by block", n_layers) as done:
        results = apply_awq(model, calib.input_ids, opts.grid, opts.clip, on_layer=lambda i: done(i + 1))
    summary.mean_alpha = sum(r.alpha for r in results) / len(results)
    summary.error_ratio = sum(r.error for r in results) / sum(r.plain_error for r in results)
    with progress.stage("saving the folded FP model"):
        folded = checkpoint.save_model(model, model_dir, work / "folded")
    del model
    gc.collect()
    return folded


def run(model_dir: Path, out: Path, opts: Options, progress: Progress = NoProgress()) -> Summary:
    model_dir, out = Path(model_dir), Path(out)
    checkpoint.architecture(model_dir)  # fail before any slow work
    build = get_build(opts.build)
    if not out.parent.is_dir():
        raise checkpoint.CheckpointError(f"the folder of {out} does not exist")
    summary = Summary(out)
    work = Path(tempfile.mkdtemp(prefix=f".{out.name}.work-", dir=out.parent))
    try:
        started = time.perf_counter()
        tokenizer = checkpoint.load_tokenizer(model_dir)
        calib = _calibrate(model_dir, tokenizer, opts, work, progress)
        summary.calibration = f"{calib.source}, {calib.n_samples} x {calib.n_tokens} tokens"
        summary.seconds["calibration"] = time.perf_counter() - started

        started = time.perf_counter()
        if opts.engine == "autoawq":
            from .engines import autoawq

            with progress.stage("AutoAWQ search (export_compatible)"):
                folded = autoawq.search_and_fold(model_dir, tokenizer, calib, opts, work / "folded")
        else:
            folded = _awq(model_dir, calib, opts, work, progress, summary)
        summary.seconds["AWQ"] = time.perf_counter() - started

        started = time.perf_counter()
        with progress.stage("converting to an F32 GGUF (vendored convert_hf_to_gguf.py)"):
            # F32, so llama-quantize sees exactly the weights the search quantized.
            f32 = convert_hf_to_gguf(folded, work / "folded-f32.gguf", "f32")
        shutil.rmtree(folded)
        with progress.stage(f"quantizing to {opts.qtype} ({build.name} llama-quantize)"):
            metadata = [a for k, v in provenance(opts, calib).items() for a in ("--override-kv", f"{k}={v}")]
            quantize(build, f32, out, opts.qtype, opts.threads, tuple(metadata))
        summary.seconds["GGUF"] = time.perf_counter() - started
        return summary
    finally:
        shutil.rmtree(work, ignore_errors=True)
