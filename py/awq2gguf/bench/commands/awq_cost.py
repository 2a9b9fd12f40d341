"""`bench awq-cost`: what an awq2gguf job needs (time, memory, disk) on a random-weight checkpoint."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import click

from ...assets.synthetic import DEFAULT_SHAPE, SHAPES
from ...builds import get_build
from ...cli_options import field_option
from ...metadata import Key, provenance
from ...modes import Quality, TuneMode
from ...paths import MODELS_DIR
from ..awq import awq2gguf
from ..cli_shared import JSON, THREADS, check_machine, finish, log
from ..peak_rss import peak_disk
from ..reports import Report, report_kinds
from ..tables import Table


@report_kinds("awq-cost")
@dataclass(kw_only=True)
class AwqCostReport(Report):
    shape: str
    threads: int
    calib_samples: int
    calib_tokens: int
    checkpoint_mib: float
    out_mib: float
    seconds: float
    peak_rss_mib: float                 # the job and its children
    peak_disk_mib: float | None = None  # work files and OUT; reports before streaming did not measure it
    tune_steps: int = 0
    tune_mode: str | None = None  # modes.TuneMode; None: no tuning (and reports before it)
    stages: list[tuple[str, float]] | None = None  # awq2gguf's stages and their seconds (None: reports before)
    quality: str = Quality.FAST.value
    calib_source: str = "generated"  # metadata.Key.CALIBRATION_SOURCE (reports before: self-sampled)
    search_samples: int | None = None  # None: all calib_samples (and reports before)

    def table(self) -> Table:
        tuned = f", --tune-steps {self.tune_steps} --tune-mode {self.tune_mode}" if self.tune_steps else ""
        searched = f" (AWQ search on {self.search_samples} of them)" if self.search_samples not in (
            None, self.calib_samples) else ""
        source = "self-sampled" if self.calib_source.startswith("generated") else self.calib_source
        title = (f"awq2gguf --quality {self.quality} on a random-weight {self.shape} ({self.checkpoint_mib:.0f} MiB "
                 f"checkpoint), {self.threads} thread(s), {source} {self.calib_samples} x {self.calib_tokens} "
                 f"tokens{searched}{tuned}")
        headers = ["wall time", "peak RSS MiB", "peak disk MiB (work files + output)", "output MiB"]
        disk = "-" if self.peak_disk_mib is None else f"{self.peak_disk_mib:.0f}"
        row = [_minutes(self.seconds), f"{self.peak_rss_mib:.0f}", disk, f"{self.out_mib:.1f}"]
        if self.stages:
            headers.append("largest stages")
            largest = sorted(self.stages, key=lambda s: -s[1])[:STAGES_SHOWN]
            row.append("; ".join(f"{name} {_minutes(seconds)}" for name, seconds in largest))
        return Table(title, headers, [row])


STAGES_SHOWN = 4


def _minutes(seconds: float) -> str:
    minutes, seconds = divmod(round(seconds), 60)
    return f"{minutes:.0f} min {seconds:02.0f} s"


@click.command("awq-cost")
@click.option("--shape", type=click.Choice(sorted(SHAPES)), default=DEFAULT_SHAPE, show_default=True,
              help="Random-weight Hugging Face model to quantize (speed and memory do not depend on the values).")
@field_option("calib_samples", "--calib-samples", show_default="awq2gguf's", help="awq2gguf --calib-samples.")
@field_option("calib_tokens", "--calib-tokens", help="awq2gguf --calib-tokens.")
@click.option("--calib", "calib", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="awq2gguf --calib: a calibration text file (the random weights make any text cost the same); "
                   "default: the model samples its own.")
@field_option("search_samples", "--search-samples", show_default="all", help="awq2gguf --search-samples.")
@field_option("quality", "--quality", type=click.Choice(Quality.values()),
              help="awq2gguf --quality (best: the report says the settings it chose).")
@click.option("--tune-steps", type=click.IntRange(0), default=0, show_default=True, help="awq2gguf --tune-steps.")
@click.option("--tune-mode", type=click.Choice(TuneMode.values()), default=TuneMode.AUTO.value, show_default=True,
              help="awq2gguf --tune-mode.")
@THREADS
@JSON
def awq_cost(shape, calib_samples, calib_tokens, calib, search_samples, quality, tune_steps, tune_mode, threads,
             as_json):
    """Wall time, peak RSS (children included) and peak disk (temporary files and OUT) of
    `awq2gguf` (by default with its defaults: self-sampled calibration, all-Q4_0 on the patched
    build) on a random-weight bf16 HF model of --shape, made once into the models folder; the
    calibration and tuning it did as OUT's metadata records them."""
    from ...assets.synthetic_hf import write_synthetic_hf

    busy = check_machine(threads)
    model_dir = MODELS_DIR / f"synthetic-{shape}-hf"
    if not (model_dir / "config.json").is_file():
        log(f"writing a random-weight {shape} Hugging Face folder -> {model_dir}")
        write_synthetic_hf(SHAPES[shape], model_dir)
    size = sum(f.stat().st_size for f in model_dir.glob("*.safetensors")) / 2**20
    args = ["--calib-tokens", str(calib_tokens), "--threads", str(threads), "--quality", quality]
    args += ["--calib-samples", str(calib_samples)] if calib_samples else []
    args += ["--calib", str(calib)] if calib else []
    args += ["--search-samples", str(search_samples)] if search_samples else []
    args += ["--tune-steps", str(tune_steps), "--tune-mode", tune_mode] if tune_steps else []
    with tempfile.TemporaryDirectory(dir=MODELS_DIR) as tmp, peak_disk(Path(tmp)) as disk:
        made = awq2gguf(f"awq2gguf {shape}", model_dir, Path(tmp) / "out.gguf", args,
                                    get_build("patched"))
        out_mib = made.path.stat().st_size / 2**20
        meta = dict(provenance(made.path))
    steps = int(meta.get(Key.TUNE_STEPS, 0))
    report = AwqCostReport(kind="awq-cost", shape=shape, threads=threads, quality=quality,
                           calib_source=meta[Key.CALIBRATION_SOURCE], calib_samples=int(meta[Key.CALIBRATION_SAMPLES]),
                           search_samples=int(meta[Key.CALIBRATION_SEARCH_SAMPLES]), calib_tokens=calib_tokens,
                           checkpoint_mib=size, out_mib=out_mib, seconds=made.seconds,
                           peak_rss_mib=made.peak_rss / 2**20, peak_disk_mib=disk() / 2**20, busy_warning=busy,
                           tune_steps=steps, tune_mode=meta.get(Key.TUNE_MODE) if steps else None,
                           stages=list(made.stages))
    finish(report, as_json)
