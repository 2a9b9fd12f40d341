"""Which ggml type each matrix of a GGUF gets: llama.cpp's per-tensor choice for a file type
(llama_tensor_get_type_impl and tensor_type_fallback in src/llama-quant.cpp), for the file types
awq2gguf writes, so that the search meets each matrix on the grid llama-quantize will put it on.

Q4_0 is the patched llama-quantize's (every matrix Q4_0, patch 0001; the output's type may be
overridden); the others are the pin's rules unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

from gguf import GGMLQuantizationType as T

from ..modes import QType
from .base import Grid

# Each file type's base type: what a matrix gets where no rule says otherwise.
BASE_TYPE = {QType.Q4_0: T.Q4_0, QType.Q4_K_S: T.Q4_K, QType.Q4_K_M: T.Q4_K, QType.Q5_K_M: T.Q5_K,
             QType.IQ4_XS: T.IQ4_XS, QType.IQ4_NL: T.IQ4_NL, QType.Q8_0: T.Q8_0, QType.F16: T.F16}
# tensor_type_fallback: a 256-weight type for rows it does not divide, by the 32-weight type beside it.
FALLBACK = {T.Q4_K: T.Q5_0, T.Q5_K: T.Q5_1, T.Q6_K: T.Q8_0, T.IQ4_XS: T.IQ4_NL}
# The GGUF roles a rule can name (llama.cpp's tensor categories).
ROLES = ("token_embd", "output", "attn_q", "attn_k", "attn_v", "attn_qkv", "attn_output", "ffn_gate", "ffn_up",
         "ffn_down")


@dataclass(frozen=True)
class Matrix:
    """One matrix of the GGUF, as the rules see it."""
    role: str  # one of ROLES
    layer: int | None  # its decoder block (None: embeddings, output)
    n_per_row: int  # ggml's ne[0]: the input dimension
    n_rows: int

    @property
    def name(self) -> str:
        return f"{self.role}.weight" if self.layer is None else f"blk.{self.layer}.{self.role}.weight"


@dataclass(frozen=True)
class Model:
    """What the rules read of the model besides the matrix."""
    n_layers: int
    n_gqa: int  # attention heads per KV head
    tied: bool  # the output matrix is the token embeddings
    llama_70b: bool = False  # llama.cpp's LLM_TYPE_70B (a Llama of 80 layers with GQA)


@dataclass(frozen=True)
class Choice:
    qtype: T
    fallback_from: T | None = None  # the rules' type, which the row length does not fit

    @property
    def grid(self) -> type[Grid]:
        return Grid.of(self.qtype)


def _more_bits(i: int, n: int) -> bool:
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def _rules(qtype: QType, m: Matrix, model: Model, imatrix: bool, output_type: T | None) -> T:
    base = BASE_TYPE[qtype]
    outputs = m.role == "output" or (model.tied and m.role == "token_embd")
    if outputs and output_type is not None:
        return output_type
    if qtype in (QType.Q4_0, QType.F16):
        return base
    if outputs:
        return T.Q8_0 if m.n_per_row % Grid.of(base).block or base == T.Q8_0 else T.Q6_K
    i, n = m.layer, model.n_layers
    if m.role in ("attn_v", "attn_qkv"):  # category_is_attn_v: a fused QKV takes attn_v's rules
        new = base
        if qtype in (QType.IQ4_NL, QType.IQ4_XS) and model.n_gqa >= 4:
            new = T.Q5_K
        elif qtype in (QType.Q4_K_M, QType.Q5_K_M) and _more_bits(i, n):
            new = T.Q6_K
        elif qtype == QType.Q4_K_S and i < 4:
            new = T.Q5_K
        if model.llama_70b and new == T.Q4_K:
            new = T.Q5_K
        return new
    if m.role == "ffn_down":
        if qtype == QType.Q4_K_M and _more_bits(i, n):
            return T.Q6_K
        if qtype in (QType.IQ4_NL, QType.IQ4_XS) and i < n // 8 and not imatrix:
            return T.Q5_K
        if qtype == QType.Q5_K_M and _more_bits(i, n):
            return T.Q6_K
        if qtype == QType.Q4_K_S and i < n // 8:
            return T.Q5_K
    return base


def choose(qtype: QType, m: Matrix, model: Model, imatrix: bool = False, output_type: T | None = None) -> Choice:
    """m's type in a `qtype` file (made with an imatrix or not; output_type: the output matrix's,
    as --output-tensor-type gives it), after llama.cpp's fallback for rows a type does not divide."""
    new = _rules(qtype, m, model, imatrix, output_type)
    if Grid.of(new).fits(m.n_per_row):
        return Choice(new)
    fallback = FALLBACK.get(new, new)
    if not Grid.of(fallback).fits(m.n_per_row):
        fallback = T.F16
    return Choice(fallback, new)


def bytes_of(choices: dict[Matrix, Choice]) -> int:
    """The matrices' bytes in the file."""
    return sum(c.grid.bytes(m.n_rows * m.n_per_row) for m, c in choices.items())
