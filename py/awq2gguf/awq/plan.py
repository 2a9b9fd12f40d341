"""A file type's per-tensor plan (grids/plan.py) put on a transformers model: each matrix's module
meets its own grid from then on (grids.assign), in the search, the checks and the forward passes;
and the importance entries the search leaves on them, as the imatrix llama-quantize reads."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .. import grids
from ..grids.plan import Choice, Matrix, Model, choose
from ..modes import QType
from .layout import layout_of


@dataclass(frozen=True)
class Planned:
    module: nn.Module
    matrix: Matrix
    choice: Choice


def _matrices(model: nn.Module) -> list[tuple[nn.Module, Matrix]]:
    """Every matrix the GGUF quantizes, with the module that holds it, in the file's order."""
    layout = layout_of(model)
    embed, head = model.get_input_embeddings(), model.get_output_embeddings()
    out = [(embed, Matrix("token_embd", None, embed.embedding_dim, embed.num_embeddings))]
    for i, layer in enumerate(model.model.layers):
        out += [(linear, Matrix(role, i, linear.in_features, linear.out_features))
                for role, linear in layout.roles(layer).items()]
    if head.weight is not embed.weight:
        out.append((head, Matrix("output", None, head.in_features, head.out_features)))
    return out


def apply_plan(model: nn.Module, qtype: QType, imatrix: bool, output_type=None) -> list[Planned]:
    """Give every matrix of model its type in a `qtype` file (made with an imatrix or not; the
    output matrix in output_type if given), and return the plan."""
    config = model.config.get_text_config()
    heads, kv_heads = config.num_attention_heads, getattr(config, "num_key_value_heads", None)
    tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
    facts = Model(len(model.model.layers), heads // (kv_heads or heads), tied)
    planned = [Planned(module, m, choose(qtype, m, facts, imatrix, output_type)) for module, m in _matrices(model)]
    head = model.get_output_embeddings()
    for p in planned:
        # The token embeddings are looked up, never multiplied, unless they are the output too: an
        # imatrix has no entry for an untied table.
        modules = (p.module, head) if tied and p.matrix.role == "token_embd" else (p.module,)
        grids.assign(modules, p.choice.grid, imatrix and (p.matrix.role != "token_embd" or tied))
    return planned


def importance_entries(planned: list[Planned]) -> dict[str, torch.Tensor]:
    """{GGUF tensor name: importance} of the matrices the search left one on."""
    return {p.matrix.name: imp for p in planned if (imp := grids.importance_of(p.module)) is not None}


def clear_importance(planned: list[Planned]) -> None:
    for p in planned:
        grids.set_importance(p.module, None)
