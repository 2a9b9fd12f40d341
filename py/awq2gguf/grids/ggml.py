"""ggml's own quantizers and dequantizers, called through ctypes from a build's libggml-base.so.

The K-quants' and IQ4's reference quantizers search their scales in float arithmetic whose order
torch cannot reproduce, so the exact grid of those types is ggml's code itself: the function
llama-quantize calls (ggml_quantize_chunk, with the same importance vector when it has one) and
the type's to_float. Our patches leave ggml-quants.c as the pin has it, so either build's library
quantizes as both builds' llama-quantize do.
"""

from __future__ import annotations

import ctypes
from concurrent.futures import ThreadPoolExecutor
from functools import cache

import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from ..builds import BUILD_NAMES, BuildMissing
from ..paths import BUILD_DIR

_TO_FLOAT = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)


class _TypeTraits(ctypes.Structure):  # struct ggml_type_traits (ggml.h)
    _fields_ = [("type_name", ctypes.c_char_p), ("blck_size", ctypes.c_int64),
                ("blck_size_interleave", ctypes.c_int64), ("type_size", ctypes.c_size_t),
                ("is_quantized", ctypes.c_bool), ("to_float", ctypes.c_void_p), ("from_float_ref", ctypes.c_void_p)]


@cache
def _lib() -> ctypes.CDLL:
    for name in BUILD_NAMES:
        path = BUILD_DIR / name / "bin" / "libggml-base.so"
        if path.is_file():
            lib = ctypes.CDLL(str(path))
            lib.ggml_quantize_chunk.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                                ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p]
            lib.ggml_quantize_chunk.restype = ctypes.c_size_t
            lib.ggml_get_type_traits.argtypes = [ctypes.c_int]
            lib.ggml_get_type_traits.restype = ctypes.POINTER(_TypeTraits)
            return lib
    raise BuildMissing(f"no llama.cpp build in {BUILD_DIR} to quantize with: run `make builds`")


@cache
def _to_float(qtype: GGMLQuantizationType):
    traits = _lib().ggml_get_type_traits(int(qtype)).contents
    return _TO_FLOAT(traits.to_float)


def row_bytes(qtype: GGMLQuantizationType, n_per_row: int) -> int:
    block, size = GGML_QUANT_SIZES[qtype]
    return n_per_row // block * size


def _row_chunks(n_rows: int) -> list[tuple[int, int]]:
    """Row ranges, one per torch thread: ctypes lets go of the GIL while ggml works."""
    n = max(1, min(torch.get_num_threads(), n_rows))
    edges = [n_rows * i // n for i in range(n + 1)]
    return [(lo, hi) for lo, hi in zip(edges, edges[1:]) if hi > lo]


def _in_threads(job, chunks) -> None:
    if len(chunks) == 1:
        job(*chunks[0])
    else:
        with ThreadPoolExecutor(len(chunks)) as pool:
            list(pool.map(lambda c: job(*c), chunks))


def quantize(qtype: GGMLQuantizationType, w: torch.Tensor, importance: torch.Tensor | None = None) -> torch.Tensor:
    """ggml_quantize_chunk of w (rows, n_per_row) as FP32, with importance (n_per_row,) as its
    imatrix: the rows' blocks as uint8 (rows, row_bytes)."""
    src = w.detach().float().contiguous()
    n_rows, n_per_row = src.shape
    out = torch.empty(n_rows, row_bytes(qtype, n_per_row), dtype=torch.uint8)
    imatrix = None if importance is None else importance.detach().float().contiguous()
    lib = _lib()

    def job(lo: int, hi: int) -> None:
        # start is counted in weights; ggml writes row lo's blocks at dst + lo * row_bytes.
        lib.ggml_quantize_chunk(int(qtype), src.data_ptr(), out.data_ptr(), lo * n_per_row, hi - lo, n_per_row,
                                None if imatrix is None else imatrix.data_ptr())

    _in_threads(job, _row_chunks(n_rows))
    return out


def dequantize(qtype: GGMLQuantizationType, blocks: torch.Tensor, n_per_row: int) -> torch.Tensor:
    """The type's to_float of blocks (rows, row_bytes): FP32 (rows, n_per_row)."""
    blocks = blocks.contiguous()
    out = torch.empty(blocks.shape[0], n_per_row)
    to_float = _to_float(qtype)

    def job(lo: int, hi: int) -> None:
        to_float(blocks[lo].data_ptr(), out[lo].data_ptr(), (hi - lo) * n_per_row)

    _in_threads(job, _row_chunks(blocks.shape[0]))
    return out
