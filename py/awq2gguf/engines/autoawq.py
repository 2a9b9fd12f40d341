"""AutoAWQ 0.2.9 as a second engine: its search and clipping, our calibration tokens and export.

AutoAWQ's `export_compatible` mode folds its scales and clipping into the FP weights without
packing them, so the result converts like any checkpoint once the `quantization_config` marker
it writes is removed. Its quantizer is symmetric INT4 with d = max/7 in groups of 32, the
closest it has to Q4_0 (d = max/-8). Install with `make autoawq` (no triton: unused on CPU).
"""

from __future__ import annotations

import json
import warnings
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn

from ..calibration import Calibration
from ..checkpoint import save_model
from ..errors import Awq2ggufError


class AutoAwqMissing(Awq2ggufError):
    pass


QUANT_CONFIG = {"zero_point": False, "q_group_size": 32, "w_bit": 4, "version": "GEMM"}


def calibration_texts(tokenizer, calib: Calibration) -> list[str]:
    """Our token windows as strings, each half a window long: AutoAWQ drops any string longer
    than max_calib_seq_len tokens after its own re-tokenization (and adds BOS), then concatenates
    the rest and cuts it into windows again, so halves give back about the same windows."""
    half = calib.n_tokens // 2
    return [tokenizer.decode(row[i:i + half], skip_special_tokens=True)
            for row in calib.search_ids.tolist() for i in (0, half)]


@contextmanager
def _snapshots_that_copy(quantizer_cls):
    """AutoAWQ 0.2.9's scale search snapshots the inspected module with `v.cpu()`, which on a
    CPU returns the same tensors, and its first grid point then scales them in place (duo scaling
    makes that scale 1/mean|w|, not 1). Every later grid point, and the final weights, start from
    W * s0 instead of W: the folded model no longer computes the FP function (bench/results/README.md,
    "Figures that were in code comments"). Make that snapshot a real copy for the duration of the search."""
    search = quantizer_cls._compute_best_scale

    def compute_best_scale(self, x, w_mean, x_mean, module2inspect: nn.Module, *args, **kwargs):
        module2inspect.state_dict = lambda: {k: v.clone() for k, v in nn.Module.state_dict(module2inspect).items()}
        try:
            return search(self, x, w_mean, x_mean, module2inspect, *args, **kwargs)
        finally:
            del module2inspect.state_dict

    quantizer_cls._compute_best_scale = compute_best_scale
    try:
        yield
    finally:
        quantizer_cls._compute_best_scale = search


def search_and_fold(model_dir: Path, tokenizer, calib: Calibration, opts, out_dir: Path) -> Path:
    try:
        # AutoAWQ 0.2.9 forces its deprecation banner past any warning filter; record it away
        with warnings.catch_warnings(record=True):
            from awq import AutoAWQForCausalLM
            from awq.quantize.quantizer import AwqQuantizer
    except ImportError as e:
        raise AutoAwqMissing(f"AutoAWQ is not installed ({e}): run `make autoawq`") from None

    model = AutoAWQForCausalLM.from_pretrained(str(model_dir), torch_dtype=torch.float32, device_map="cpu")
    texts = calibration_texts(tokenizer, calib)
    with _snapshots_that_copy(AwqQuantizer):
        model.quantize(tokenizer, quant_config=QUANT_CONFIG, calib_data=texts, export_compatible=True,
                       apply_clip=opts.clip, max_calib_samples=len(texts), max_calib_seq_len=calib.n_tokens)
    save_model(model.model, model_dir, out_dir)
    config = out_dir / "config.json"
    data = json.loads(config.read_text())
    data.pop("quantization_config", None)  # the converter refuses "quantized" checkpoints
    config.write_text(json.dumps(data, indent=2))
    return out_dir
