"""Where AWQ can move scale between layers in a decoder block, per supported architecture.

Each group is a producer (an RMSNorm, or a linear whose output channels feed the consumers
directly) and the linears that consume its output. Dividing the producer's output channels by s
and multiplying the consumers' input columns by s leaves the function unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from ..proc_io import Awq2ggufError

# Every architecture awq2gguf takes, with its transformers config class (for random test models).
ARCHITECTURES = {"LlamaForCausalLM": "LlamaConfig", "MistralForCausalLM": "MistralConfig",
                 "Qwen2ForCausalLM": "Qwen2Config", "Qwen3ForCausalLM": "Qwen3Config"}
SUPPORTED_ARCHITECTURES = tuple(ARCHITECTURES)


class UnsupportedArchitecture(Awq2ggufError):
    pass


def check_architecture(config) -> str:
    archs = getattr(config, "architectures", None) or [type(config).__name__]
    if archs[0] not in SUPPORTED_ARCHITECTURES:
        raise UnsupportedArchitecture(f"architecture {archs[0]} is not supported; supported: "
                                      f"{', '.join(SUPPORTED_ARCHITECTURES)}")
    return archs[0]


@dataclass
class ScaleGroup:
    name: str
    producer: nn.Module
    consumers: list[nn.Linear]
    # The consumers' rows are residual-stream channels, a few of which carry massive activations: a
    # sample of rows misses them (search.SEARCH_MACS; Qwen2.5-Coder-0.5B's down projections judged
    # on every 3rd row took another alpha in 14 of 24 blocks, up to +1.75% output error).
    writes_residual: bool = False


def scale_groups(layer: nn.Module) -> list[ScaleGroup]:
    """The scaling groups of one decoder layer (RMSNorm -> q/k/v, v -> o, RMSNorm -> gate/up, up -> down)."""
    attn, mlp = layer.self_attn, layer.mlp
    groups = [ScaleGroup("attn_in", layer.input_layernorm, [attn.q_proj, attn.k_proj, attn.v_proj])]
    # v's channels map one to one onto o's inputs only without grouped-query attention.
    if attn.v_proj.out_features == attn.o_proj.in_features:
        groups.append(ScaleGroup("attn_v_o", attn.v_proj, [attn.o_proj], writes_residual=True))
    groups += [ScaleGroup("mlp_in", layer.post_attention_layernorm, [mlp.gate_proj, mlp.up_proj]),
               ScaleGroup("mlp_down", mlp.up_proj, [mlp.down_proj], writes_residual=True)]
    return groups


def input_sites(layer: nn.Module) -> dict[nn.Linear, list[nn.Linear]]:
    """The linears of one decoder layer grouped by the input they share, keyed by the first of each."""
    attn, mlp = layer.self_attn, layer.mlp
    return {attn.q_proj: [attn.q_proj, attn.k_proj, attn.v_proj], attn.o_proj: [attn.o_proj],
            mlp.gate_proj: [mlp.gate_proj, mlp.up_proj], mlp.down_proj: [mlp.down_proj]}


def clip_targets(layer: nn.Module) -> list[nn.Linear]:
    """Linears whose Q4_0 blocks get a clipping search. Not q/k: their output error says little
    about the attention scores they feed (AutoAWQ leaves them out too)."""
    attn, mlp = layer.self_attn, layer.mlp
    return [attn.v_proj, attn.o_proj, mlp.gate_proj, mlp.up_proj, mlp.down_proj]
