"""A model's off-grid twin: the same function, its matrices' quantization blocks shuffled.

Every development model is dequantized from a 4-bit GGUF, so its weights lie on that file's grid
and re-quantizing to the same kind of grid (a K-quant to a Q4_K_M source) gives them back almost
exactly: a comparison with K-quants is tilted toward them. No PyPI package ships the original FP
weights of a small causal LM, so the twin stands in for them. It permutes the channels every
quantization block runs along, which leaves the model's function unchanged: the residual stream
(columns of every matrix that reads it, rows of the two that write it, the norms' weights, the
embedding table's columns), each block's feed-forward channels (gate and up rows, down columns)
and, within each key/value head, its value channels (value rows and bias, the output projection's
columns of every query head that reads them). A block of 32 weights then holds values from up to
32 blocks of the source, each on its own grid, so no 4-bit grid fits them better than it fits
real FP weights; the values keep their source's distribution, outliers and salient channels.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import torch

from ..atomic import atomic_path
from ..errors import Awq2ggufError


class OffGridError(Awq2ggufError):
    pass


PICKLED_WEIGHTS = (".bin", ".pt", ".pth")  # weights the twin cannot permute (it reads safetensors)


# Parameter name (after "model." or as lm_head) -> which of its axes the permutations reorder:
# "hidden" the residual stream, "ffn" the block's feed-forward channels, "value" its value channels.
_AXES = {
    r"embed_tokens\.weight|lm_head\.weight": (None, "hidden"),
    r"norm\.weight|layers\.\d+\.(input|post_attention|pre_feedforward|post_feedforward)_layernorm\.weight":
        ("hidden",),
    r"layers\.\d+\.self_attn\.[qk]_proj\.weight": (None, "hidden"),
    r"layers\.\d+\.self_attn\.[qk]_proj\.bias|layers\.\d+\.self_attn\.[qk]_norm\.weight": (None,),
    r"layers\.\d+\.self_attn\.v_proj\.weight": ("value", "hidden"),
    r"layers\.\d+\.self_attn\.v_proj\.bias": ("value",),
    r"layers\.\d+\.self_attn\.o_proj\.weight": ("hidden", "value_out"),
    r"layers\.\d+\.mlp\.(gate|up)_proj\.weight": ("ffn", "hidden"),
    r"layers\.\d+\.mlp\.down_proj\.weight": ("hidden", "ffn"),
}


def _block(name: str) -> int | None:
    m = re.search(r"layers\.(\d+)\.", name)
    return int(m[1]) if m else None


class Permutations:
    """The twin's permutations for a model of this config, drawn from one seed."""

    def __init__(self, config: dict, seed: int = 0):
        text = config.get("text_config", config)
        hidden, heads, kv_heads = text["hidden_size"], text["num_attention_heads"], text["num_key_value_heads"]
        self.head_dim = text.get("head_dim") or hidden // heads
        self.group = heads // kv_heads  # query heads reading one value head
        g = torch.Generator().manual_seed(seed)
        self.hidden = torch.randperm(hidden, generator=g)
        layers = range(text["num_hidden_layers"])
        self.ffn = [torch.randperm(text["intermediate_size"], generator=g) for _ in layers]
        # One permutation of head_dim channels per value head, as an index over all value rows.
        self.value = [torch.cat([h * self.head_dim + torch.randperm(self.head_dim, generator=g)
                                 for h in range(kv_heads)]) for _ in layers]

    def index(self, axis: str, block: int | None) -> torch.Tensor:
        if axis == "hidden":
            return self.hidden
        if axis == "ffn":
            return self.ffn[block]
        value = self.value[block]
        if axis == "value":
            return value
        # The output projection's columns: query head h reads value head h // group.
        per_head = value.view(-1, self.head_dim) - torch.arange(0, len(value), self.head_dim)[:, None]
        return torch.cat([h * self.head_dim + per_head[h // self.group]
                          for h in range(len(per_head) * self.group)])

    def apply(self, name: str, t: torch.Tensor) -> torch.Tensor:
        local = name.removeprefix("model.")
        axes = next((a for pattern, a in _AXES.items() if re.fullmatch(pattern, local)), None)
        if axes is None or len(axes) != t.dim():
            raise OffGridError(f"cannot make an off-grid twin of a model with the tensor {name} "
                               f"{tuple(t.shape)}: only separate q/k/v and gate/up matrices are known")
        for dim, axis in enumerate(axes):
            if axis is not None:
                t = t.index_select(dim, self.index(axis, _block(name)))
        return t.contiguous()


def permute_state(tensors: dict[str, torch.Tensor], config: dict, seed: int = 0) -> dict[str, torch.Tensor]:
    perms = Permutations(config, seed)
    return {name: perms.apply(name, t) for name, t in tensors.items()}


def off_grid_folder(src: Path, dst: Path, seed: int = 0) -> Path:
    """src's Hugging Face folder (safetensors) rewritten as its off-grid twin at dst, made whole or not at all."""
    from safetensors.torch import load_file, save_file

    config = json.loads((src / "config.json").read_text())
    if pickled := sorted(f.name for f in src.iterdir() if f.suffix in PICKLED_WEIGHTS):
        raise OffGridError(f"{src}: {', '.join(pickled)} would be copied unpermuted beside the permuted weights; "
                           "save the model as safetensors first")
    with atomic_path(dst) as tmp:
        tmp.mkdir()
        for f in src.iterdir():
            if f.suffix == ".safetensors":
                save_file(permute_state(load_file(f), config, seed), tmp / f.name, metadata={"format": "pt"})
            elif f.is_file():
                shutil.copy2(f, tmp / f.name)
    return dst
