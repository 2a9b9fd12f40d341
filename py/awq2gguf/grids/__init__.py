"""The quantization grids (one class per ggml type, base.py and types.py), the per-tensor plan of a
file type (plan.py), and which grid each module of a model meets: the GGUF's type for its matrix,
set once by the plan (Q4_0 where none was set), with the importance vector llama-quantize will
hand that type (the imatrix entry of the matrix's input), which its quantizer weighs errors by."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .base import Grid
from .types import F16, F32, IQ4_NL, IQ4_XS, Q4_0, Q4_1, Q4_K, Q5_0, Q5_1, Q5_K, Q6_K, Q8_0

__all__ = ["Grid", "F16", "F32", "IQ4_NL", "IQ4_XS", "Q4_0", "Q4_1", "Q4_K", "Q5_0", "Q5_1", "Q5_K", "Q6_K", "Q8_0",
           "assign", "grid_of", "weighs", "set_importance", "importance_of", "fake_quant"]



@dataclass
class _Slot:
    grid: type[Grid]
    weighs: bool  # the file is quantized with an imatrix entry for this matrix
    importance: torch.Tensor | None = None


_SLOT = "awq2gguf_grid"


def assign(modules: tuple[nn.Module, ...] | nn.Module, grid: type[Grid], weighted: bool = False) -> None:
    """The modules' matrix (one matrix: a tied output and its embeddings share it) is stored on
    grid; weighted: with an imatrix entry, which set_importance keeps."""
    slot = _Slot(grid, weighted and grid.weighted)
    for m in modules if isinstance(modules, tuple) else (modules,):
        setattr(m, _SLOT, slot)


def _slot(module: nn.Module) -> _Slot | None:
    return getattr(module, _SLOT, None)


def grid_of(module: nn.Module) -> type[Grid]:
    return Q4_0 if (slot := _slot(module)) is None else slot.grid


def weighs(module: nn.Module) -> bool:
    return (slot := _slot(module)) is not None and slot.weighs


def set_importance(module: nn.Module, importance: torch.Tensor | None) -> None:
    """The imatrix entry of module's matrix (mean square of each input channel), where it weighs."""
    if weighs(module):
        _slot(module).importance = importance


def importance_of(module: nn.Module) -> torch.Tensor | None:
    return None if (slot := _slot(module)) is None else slot.importance


def fake_quant(module: nn.Module, w: torch.Tensor) -> torch.Tensor:
    """w's round trip through the grid module's matrix is stored on, weighted as the file will be."""
    return grid_of(module).fake_quant(w, importance_of(module))
