"""The importance matrix llama-quantize --imatrix reads, written from the search's own statistics:
each matrix's entry is the mean square of each of its input channels over the calibration tokens
(what llama-imatrix accumulates), for the input the folded matrix really sees.

Written in llama-imatrix's legacy layout with one call per entry, which llama-quantize divides by
1: the quantizer then gets the very FP32 values the search weighed the errors by.
"""

from __future__ import annotations

import struct
from pathlib import Path

import torch

from ..atomic import atomic_path


def write_imatrix(path: Path, entries: dict[str, torch.Tensor], dataset: str = "awq2gguf calibration") -> Path:
    """entries: {GGUF tensor name: importance (n_per_row,)}; path appears only when complete."""
    if not entries:
        raise ValueError("an imatrix needs at least one entry")
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        f.write(struct.pack("<i", len(entries)))
        for name, values in entries.items():
            raw = name.encode()
            v = values.detach().float().contiguous().numpy()
            f.write(struct.pack("<i", len(raw)) + raw + struct.pack("<ii", 1, v.size))
            f.write(v.astype("<f4").tobytes())
        raw = dataset.encode()
        f.write(struct.pack("<ii", 1, len(raw)) + raw)  # chunks, then the dataset's name
    return Path(path)
