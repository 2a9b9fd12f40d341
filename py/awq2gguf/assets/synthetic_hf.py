"""Random-weight Hugging Face folders with the shapes of synthetic.SHAPES, for awq2gguf's own runs.

Used to time awq2gguf on a 0.5B-shaped model and, at tiny sizes, to run the whole pipeline in
tests for each supported architecture. The tokenizer is the real Qwen2 one, rebuilt by
transformers from the vocabulary GGUF that llama.cpp ships, so the converter recognises it.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ..awq.layout import ARCHITECTURES
from ..atomic import atomic_path
from .synthetic import QWEN2_VOCAB, ModelShape



def qwen2_tokenizer():
    from transformers import AutoTokenizer

    if not QWEN2_VOCAB.is_file():
        raise FileNotFoundError(f"{QWEN2_VOCAB} not found: run `make vendor` first")
    return AutoTokenizer.from_pretrained(QWEN2_VOCAB.parent, gguf_file=QWEN2_VOCAB.name)


# What a small random model of an architecture needs besides its shape: Gemma 3's sliding window
# short enough to act on a test prompt, and attention scaled by the head size as llama.cpp scales
# it (below 27B; its layer pattern stays Gemma 3's, one global layer in 6, which llama.cpp assumes);
# Phi-3's padding token inside a small vocabulary.
SMALL_MODEL_ITEMS = {
    "Gemma3ForCausalLM": lambda head_dim: {"sliding_window": 8, "query_pre_attn_scalar": head_dim},
    "Phi3ForCausalLM": lambda head_dim: {"pad_token_id": None},
}
# The tokenizer class Phi-3's converter must find to take a tokenizer.json (as Phi-4-mini ships).
TOKENIZER_CLASS = {"Phi3ForCausalLM": "GPT2Tokenizer"}


def random_config(arch: str, *, vocab_size: int, hidden_size: int, intermediate_size: int, num_hidden_layers: int,
                  num_attention_heads: int, num_key_value_heads: int, head_dim: int, **config_items):
    """A transformers config of `arch` for a small random model of this shape."""
    import transformers

    items = SMALL_MODEL_ITEMS.get(arch, lambda _: {})(head_dim) | config_items
    return getattr(transformers, ARCHITECTURES[arch].config_class)(
        vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=intermediate_size,
        num_hidden_layers=num_hidden_layers, num_attention_heads=num_attention_heads,
        num_key_value_heads=num_key_value_heads, head_dim=head_dim, architectures=[arch], **items)


def write_synthetic_hf(shape: ModelShape, out: Path, arch: str = "Qwen2ForCausalLM", seed: int = 0,
                       dtype: torch.dtype = torch.bfloat16, **config_items) -> Path:
    """`shape` as a HF folder of `arch` (weights in `dtype`, as checkpoints ship), with config_items
    added to its config or replacing the shape's (e.g. rope_scaling); same seed, same weights."""
    import transformers

    shape_items = {"max_position_embeddings": shape.n_ctx_train, "rope_theta": shape.rope_theta,
                   "rms_norm_eps": shape.rms_eps, "tie_word_embeddings": shape.tied_embeddings}
    config = random_config(
        arch, vocab_size=shape.n_vocab, hidden_size=shape.n_embd, intermediate_size=shape.n_ff,
        num_hidden_layers=shape.n_layer, num_attention_heads=shape.n_head, num_key_value_heads=shape.n_head_kv,
        head_dim=shape.head_dim, **shape_items | config_items)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    with atomic_path(out) as tmp:
        model.save_pretrained(tmp)
        tokenizer = qwen2_tokenizer()
        tokenizer.save_pretrained(tmp)
        if arch in TOKENIZER_CLASS:
            settings = json.loads((tmp / "tokenizer_config.json").read_text())
            settings["tokenizer_class"] = TOKENIZER_CLASS[arch]
            (tmp / "tokenizer_config.json").write_text(json.dumps(settings, indent=2))
    return Path(out)
