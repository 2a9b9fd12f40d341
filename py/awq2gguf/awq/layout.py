"""Where AWQ can move scale between layers in a decoder block, per supported architecture.

Each group is a producer (an RMSNorm, or the rows of a linear whose output channels feed the
consumers directly) and the linears that consume its output. Dividing the producer's output
channels by s and multiplying the consumers' input columns by s leaves the function unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import nn

from ..errors import Awq2ggufError


@dataclass
class ScaleGroup:
    name: str
    producer: nn.Module
    consumers: list[nn.Linear]
    rows: slice = field(default_factory=lambda: slice(None))  # the producer's output channels the consumers read
    norm_offset: float = 0.0  # a producer RMSNorm's (Layout.norm_offset)
    # The consumers' rows are residual-stream channels, a few of which carry massive activations: a
    # sample of rows misses them and chooses other alphas (search.SEARCH_MACS; bench/results/README.md,
    # Faster compensation and search toward a 7B).
    writes_residual: bool = False


@dataclass(frozen=True)
class Layout:
    """Where one architecture's decoder layer keeps its parts (attribute paths from the layer).
    A fused projection (Phi-3's qkv_proj, gate_up_proj) is one name: v, and up, are its last rows."""
    qkv: tuple[str, ...] = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")
    o: str = "self_attn.o_proj"
    gate_up: tuple[str, ...] = ("mlp.gate_proj", "mlp.up_proj")
    down: str = "mlp.down_proj"
    attn_norm: str = "input_layernorm"
    mlp_norm: str = "post_attention_layernorm"  # before the MLP (Gemma 3's of this name is after attention)
    # Its RMSNorms multiply by (norm_offset + weight): Gemma's (1 + w) folds as (1 + w) / s - 1.
    norm_offset: float = 0.0

    def linears(self, layer: nn.Module, names) -> list[nn.Linear]:
        return [layer.get_submodule(n) for n in names]

    def scale_groups(self, layer: nn.Module) -> list[ScaleGroup]:
        """The scaling groups of one decoder layer (RMSNorm -> q/k/v, v -> o, RMSNorm -> gate/up, up -> down)."""
        qkv, gate_up = self.linears(layer, self.qkv), self.linears(layer, self.gate_up)
        o, down = layer.get_submodule(self.o), layer.get_submodule(self.down)
        attn_norm, mlp_norm = layer.get_submodule(self.attn_norm), layer.get_submodule(self.mlp_norm)
        v = qkv[-1]
        # q has o's width; a fused qkv holds k and v of one width after it.
        v_rows = v.out_features if len(qkv) > 1 else (v.out_features - o.in_features) // 2
        groups = [ScaleGroup("attn_in", attn_norm, qkv, norm_offset=self.norm_offset)]
        # v's channels map one to one onto o's inputs only without grouped-query attention.
        if v_rows == o.in_features:
            groups.append(ScaleGroup("attn_v_o", v, [o], rows=slice(v.out_features - v_rows, None),
                                     writes_residual=True))
        up = gate_up[-1]
        groups += [ScaleGroup("mlp_in", mlp_norm, gate_up, norm_offset=self.norm_offset),
                   ScaleGroup("mlp_down", up, [down], rows=slice(up.out_features - down.in_features, None),
                              writes_residual=True)]
        return groups

    def input_sites(self, layer: nn.Module) -> dict[nn.Linear, list[nn.Linear]]:
        """The linears of one decoder layer grouped by the input they share, keyed by the first of each."""
        sites = [self.linears(layer, names) for names in (self.qkv, (self.o,), self.gate_up, (self.down,))]
        return {linears[0]: linears for linears in sites}

    def roles(self, layer: nn.Module) -> dict[str, nn.Linear]:
        """The layer's linears by their role in the GGUF (llama.cpp's tensor names: a fused qkv is
        attn_qkv, a fused gate_up ffn_up)."""
        qkv = ("attn_q", "attn_k", "attn_v") if len(self.qkv) == 3 else ("attn_qkv",)
        gate_up = ("ffn_gate", "ffn_up") if len(self.gate_up) == 2 else ("ffn_up",)
        linears = self.linears(layer, (*self.qkv, self.o, *self.gate_up, self.down))
        return dict(zip((*qkv, "attn_output", *gate_up, "ffn_down"), linears, strict=True))

    def clip_targets(self, layer: nn.Module) -> list[nn.Linear]:
        """Linears whose Q4_0 blocks get a clipping search. Not q/k (nor a fused qkv): their output
        error says little about the attention scores they feed (AutoAWQ leaves them out too)."""
        v_alone = self.qkv[2:]  # v_proj when q, k and v are apart; nothing of a fused qkv
        return self.linears(layer, (*v_alone, self.o, *self.gate_up, self.down))


@dataclass(frozen=True)
class Architecture:
    config_class: str  # the transformers config class (for random test models)
    layout: Layout = Layout()


# Every architecture awq2gguf takes. Which output matrix is tied to the embeddings is the config's
# tie_word_embeddings (Gemma 3 and Llama 3.2 1B/3B tie it).
ARCHITECTURES = {
    "LlamaForCausalLM": Architecture("LlamaConfig"),
    "MistralForCausalLM": Architecture("MistralConfig"),
    "Qwen2ForCausalLM": Architecture("Qwen2Config"),
    "Qwen3ForCausalLM": Architecture("Qwen3Config"),
    "Gemma3ForCausalLM": Architecture("Gemma3TextConfig", Layout(mlp_norm="pre_feedforward_layernorm",
                                                                 norm_offset=1.0)),
    "Phi3ForCausalLM": Architecture("Phi3Config", Layout(qkv=("self_attn.qkv_proj",),
                                                         gate_up=("mlp.gate_up_proj",))),
}
SUPPORTED_ARCHITECTURES = tuple(ARCHITECTURES)


class UnsupportedArchitecture(Awq2ggufError):
    pass


def check_architecture(config) -> str:
    archs = getattr(config, "architectures", None) or [type(config).__name__]
    return _supported(archs[0])


def layout_of(model: nn.Module) -> Layout:
    """The layout of a model transformers built (its class is the architecture's name)."""
    return ARCHITECTURES[_supported(type(model).__name__)].layout


def _supported(name: str) -> str:
    if name not in ARCHITECTURES:
        raise UnsupportedArchitecture(f"architecture {name} is not supported; supported: "
                                      f"{', '.join(SUPPORTED_ARCHITECTURES)}")
    return name
