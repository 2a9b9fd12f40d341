"""AutoAWQ 0.2.9 as a second engine: its search and clipping, our calibration tokens and export.

AutoAWQ's `export_compatible` mode folds its scales and clipping into the FP weights without
packing them, so the result converts like any checkpoint once the `quantization_config` marker
it writes is removed. Its quantizer is symmetric INT4 with d = max/7 in groups of 32, the
closest it has to Q4_0 (d = max/-8). Install with `make autoawq` (no triton: unused on CPU).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..calibration import Calibration
from ..checkpoint import save_model

class AutoAwqMissing(RuntimeError):
    pass


QUANT_CONFIG = {"zero_point": False, "q_group_size": 32, "w_bit": 4, "version": "GEMM"}


def calibration_texts(tokenizer, calib: Calibration) -> list[str]:
    """Our token windows as strings, each half a window long: AutoAWQ drops any string longer
    than max_calib_seq_len tokens after its own re-tokenization (and adds BOS), then concatenates
    the rest and cuts it into windows again, so halves give back about the same windows."""
    half = calib.n_tokens // 2
    return [tokenizer.decode(row[i:i + half], skip_special_tokens=True)
            for row in calib.input_ids.tolist() for i in (0, half)]


def search_and_fold(model_dir: Path, tokenizer, calib: Calibration, opts, out_dir: Path) -> Path:
    try:
        from awq import AutoAWQForCausalLM
    except ImportError as e:
        raise AutoAwqMissing(f"AutoAWQ is not installed ({e}): run `make autoawq`") from None

    model = AutoAWQForCausalLM.from_pretrained(str(model_dir), torch_dtype=torch.float32, device_map="cpu")
    texts = calibration_texts(tokenizer, calib)
    model.quantize(tokenizer, quant_config=QUANT_CONFIG, calib_data=texts, export_compatible=True,
                   apply_clip=opts.clip, max_calib_samples=len(texts), max_calib_seq_len=calib.n_tokens)
    save_model(model.model, model_dir, out_dir)
    config = out_dir / "config.json"
    data = json.loads(config.read_text())
    data.pop("quantization_config", None)  # the converter refuses "quantized" checkpoints
    config.write_text(json.dumps(data, indent=2))
    return out_dir
