"""`bench lora`: a fine-tuned LoRA adapter merged by awq2gguf --lora, with and without blocks dropped."""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

import click

from ... import lora as lora_merge
from ...assets.dev_models import DEV_MODELS, f16_gguf, hf_folder
from ...builds import get_build
from ...convert import convert_hf_to_gguf
from ...options import Options
from ...paths import MODELS_DIR
from ...quality import FAST_CALIB_SAMPLES
from .. import perplexity
from ..awq import CALIBRATION_FILE, Made, awq2gguf, calibration_file
from ..cli_shared import BUILD, DEV_MODEL, JSON, PERPLEXITY_TEXT, THREADS, check_machine, check_text, err, finish, \
    log
from ..lora import make_adapter, training_lines
from ..reports import MadeRow, TextReport, report_kinds
from ..tables import Table, optional


@dataclass(kw_only=True)
class LoraRow(MadeRow):
    """One file: its scores and what making it took."""
    label: str


@report_kinds("lora")
@dataclass(kw_only=True)
class LoraReport(TextReport):
    model: str
    dev_model: str
    adapter: dict          # how it was trained (bench.lora.make_adapter's training.json)
    drop_blocks: int
    rows: list[LoraRow]
    ROWS = {"rows": LoraRow}

    def table(self) -> Table:
        a = self.adapter
        title = (f"{self.model} with a LoRA adapter (rank {a['rank']}, {a['steps']} steps of {a['batch']} x "
                 f"{a['seq_len']} tokens on {a['lines']} WikiText lines, second half), {self.build} build: "
                 f"perplexity over {self.chunks} x {self.ctx} tokens of the text's start")
        rows = [[r.label, f"{r.size_mib:.1f}", f"{r.ppl:.3f}", optional(r.make_s, ".0f"),
                 optional(r.peak_rss_mib, ".0f")] for r in self.rows]
        return Table(title, ["model", "size MiB", "PPL", "make s", "peak RSS MiB"], rows)


@click.command()
@BUILD
@PERPLEXITY_TEXT
@click.option("--lines", type=click.IntRange(1), default=300, show_default=True,
              help="WikiText paragraphs (from the text's second half) the adapter is trained on.")
@click.option("--steps", type=click.IntRange(1), default=40, show_default=True, help="Training steps (4 x 256 tokens each).")
@click.option("--drop-blocks", type=click.IntRange(1), default=4, show_default=True,
              help="Blocks the last file drops (SLEB) after merging the adapter.")
@THREADS
@DEV_MODEL
@JSON
def lora(build_name, text, ctx, chunks, lines, steps, drop_blocks, threads, dev_model, as_json):
    """Fine-tune a LoRA adapter for --dev-model on WikiText lines (cached under models/lora/), then
    make all-Q4_0 files with awq2gguf (calibration file as in `bench awq`): without the adapter,
    with --lora, and with --lora --drop-blocks N; perplexity of each, and of FP16 with and
    without the adapter merged."""
    import torch

    check_text(text)
    busy = check_machine(threads)
    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as tmp:
        build, model_dir, f16 = get_build(build_name), hf_folder(dev_model), f16_gguf(dev_model)
        out_dir = MODELS_DIR / "lora" / dev_model
        adapter = out_dir / f"wikitext-{lines}-lines-{steps}-steps"
        if not (adapter / "training.json").is_file():
            with err.status("") as status:
                make_adapter(model_dir, training_lines(text.read_text(), lines), adapter, steps,
                             on_step=lambda s, loss: status.update(f"LoRA fine-tune: step {s}/{steps}, "
                                                                   f"loss {loss:.3f}"))
        log(f"adapter {adapter}")
        merged = lora_merge.merge(model_dir, lora_merge.read_adapter(adapter), Path(tmp) / "merged")
        merged_f16 = convert_hf_to_gguf(merged, Path(tmp) / "merged-f16.gguf", "f16")
        calib = calibration_file(model_dir, text, FAST_CALIB_SAMPLES, Options.calib_tokens,
                                                 out_dir / CALIBRATION_FILE)
        args = ["--calib", str(calib), "--threads", str(threads)]
        made = [Made("FP16", f16), Made("FP16 + adapter (merged)", merged_f16)]
        for label, name, extra in [
                ("all-Q4_0 awq2gguf", "awq2gguf.gguf", []),
                ("all-Q4_0 awq2gguf --lora", "awq2gguf-lora.gguf", ["--lora", str(adapter)]),
                (f"all-Q4_0 awq2gguf --lora --drop-blocks {drop_blocks}", f"awq2gguf-lora-drop{drop_blocks}.gguf",
                 ["--lora", str(adapter), "--drop-blocks", str(drop_blocks)])]:
            log(f"awq2gguf {' '.join(extra)}")
            made.append(awq2gguf(label, model_dir, out_dir / name, args + extra, build))
        rows = [dict(label=m.label, size_mib=m.path.stat().st_size / 2**20, make_s=m.seconds,
                     peak_rss_mib=m.peak_rss / 2**20 if m.peak_rss else None,
                     **perplexity.on_text(build, m.path, text, ctx, chunks, threads)) for m in made]
        training = (adapter / "training.json").read_text()
    report = LoraReport(kind="lora", model=DEV_MODELS[dev_model].title, dev_model=dev_model, build=build_name,
                        text=str(text), ctx=ctx, chunks=chunks, adapter=json.loads(training),
                        drop_blocks=drop_blocks, busy_warning=busy, rows=rows)
    finish(report, as_json)
