"""The grids awq2gguf writes: the float types, Q4_0 and Q8_0 in exact torch, and the K-quants and
IQ4 (with the 32-weight types llama.cpp falls back to) through ggml."""

from __future__ import annotations

from gguf import GGMLQuantizationType as T

from ..q4_0 import q4_0_fake_quant
from ..q8_0 import q8_0_fake_quant
from .base import Grid


class F32(Grid, qtype=T.F32):
    weighted = searched = False

    @classmethod
    def fake_quant(cls, w, importance=None):
        return w


class F16(Grid, qtype=T.F16):
    weighted = searched = False

    @classmethod
    def fake_quant(cls, w, importance=None):
        return w.half().to(w.dtype)


class Q4_0(Grid, qtype=T.Q4_0):
    clips_and_compensates = True

    @classmethod
    def fake_quant(cls, w, importance=None):
        # With an imatrix ggml's Q4_0 searches its scale (quantize_row_q4_0_impl): ggml's code then.
        return q4_0_fake_quant(w) if importance is None else super().fake_quant(w, importance)


class Q8_0(Grid, qtype=T.Q8_0):
    weighted = searched = False

    @classmethod
    def fake_quant(cls, w, importance=None):
        return q8_0_fake_quant(w)


class Q4_1(Grid, qtype=T.Q4_1):
    pass


class Q5_0(Grid, qtype=T.Q5_0):
    pass


class Q5_1(Grid, qtype=T.Q5_1):
    pass


class Q4_K(Grid, qtype=T.Q4_K):
    pass


class Q5_K(Grid, qtype=T.Q5_K):
    pass


class Q6_K(Grid, qtype=T.Q6_K):
    pass


class IQ4_NL(Grid, qtype=T.IQ4_NL):
    pass


class IQ4_XS(Grid, qtype=T.IQ4_XS):
    pass
