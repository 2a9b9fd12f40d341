"""One class per ggml type, as gguf-py's quants.py has them: registered by the type they stand for,
their block sizes from gguf's constants table."""

from __future__ import annotations

from typing import ClassVar

import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from .ggml import dequantize, quantize


class Grid:
    """The values a ggml type can store, as the search meets them: encode (the blocks ggml writes),
    decode, and their round trip. Every type quantizes through ggml's own code unless a subclass
    gives an exact torch version (Q4_0, Q8_0: much faster, bit for bit the same)."""
    qtype: ClassVar[GGMLQuantizationType]
    block: ClassVar[int]  # weights per block
    type_size: ClassVar[int]  # bytes per block
    # Whether AWQ's scale search is worth running (not on the 8- and 16-bit types).
    searched: ClassVar[bool] = True
    # The searches and roundings implemented on this grid beyond the scales: per-block clipping,
    # compensated rounding and tuning (Q4_0's symmetric 32-weight blocks only, today).
    clips_and_compensates: ClassVar[bool] = False
    # Whether llama-quantize hands this type an imatrix when it has one (Q8_0's quantizer ignores it).
    weighted: ClassVar[bool] = True
    _registry: ClassVar[dict[GGMLQuantizationType, type[Grid]]] = {}

    def __init_subclass__(cls, qtype: GGMLQuantizationType, **kwargs):
        super().__init_subclass__(**kwargs)
        cls.qtype = qtype
        cls.block, cls.type_size = GGML_QUANT_SIZES[qtype]
        Grid._registry[qtype] = cls

    @classmethod
    def named(cls, name: str) -> type[Grid]:
        """The grid of a ggml type name (Q4_K, iq4_xs, ...)."""
        try:
            return cls._registry[GGMLQuantizationType[name.upper()]]
        except KeyError:
            raise ValueError(f"no grid for ggml type {name!r}: one of "
                             f"{', '.join(t.name for t in cls._registry)}") from None

    @classmethod
    def of(cls, qtype: GGMLQuantizationType) -> type[Grid]:
        return cls._registry[qtype]

    @classmethod
    def fits(cls, n_per_row: int) -> bool:
        return n_per_row % cls.block == 0

    @classmethod
    def bytes(cls, n_weights: int) -> int:
        return n_weights // cls.block * cls.type_size

    @classmethod
    def _check(cls, w: torch.Tensor) -> None:
        if not cls.fits(w.shape[-1]):
            raise ValueError(f"{cls.qtype.name} needs rows that are a multiple of {cls.block} long, got {w.shape[-1]}")

    @classmethod
    def encode(cls, w: torch.Tensor, importance: torch.Tensor | None = None) -> torch.Tensor:
        """What the GGUF stores of w (rows, n_per_row): uint8 (rows, row bytes), as llama-quantize
        writes it (with importance (n_per_row,) as its imatrix entry)."""
        cls._check(w)
        return quantize(cls.qtype, w.reshape(-1, w.shape[-1]), importance if cls.weighted else None)

    @classmethod
    def decode(cls, blocks: torch.Tensor, n_per_row: int) -> torch.Tensor:
        return dequantize(cls.qtype, blocks, n_per_row)

    @classmethod
    def fake_quant(cls, w: torch.Tensor, importance: torch.Tensor | None = None) -> torch.Tensor:
        """w's round trip through the type (computed in FP32, returned in w's dtype)."""
        return cls.decode(cls.encode(w, importance), w.shape[-1]).reshape(w.shape).to(w.dtype)
