"""Random-weight Hugging Face folders with the shapes of synthetic.SHAPES, for awq2gguf's own runs.

Used to time awq2gguf on a 0.5B-shaped model and, at tiny sizes, to run the whole pipeline in
tests for each supported architecture. The tokenizer is the real Qwen2 one, rebuilt by
transformers from the vocabulary GGUF that llama.cpp ships, so the converter recognises it.
"""

from __future__ import annotations

from pathlib import Path

import torch

from ..awq.layout import ARCHITECTURES
from ..proc_io import atomic_path
from .synthetic import QWEN2_VOCAB, ModelShape



def qwen2_tokenizer():
    from transformers import AutoTokenizer

    if not QWEN2_VOCAB.is_file():
        raise FileNotFoundError(f"{QWEN2_VOCAB} not found: run `make vendor` first")
    return AutoTokenizer.from_pretrained(QWEN2_VOCAB.parent, gguf_file=QWEN2_VOCAB.name)


def write_synthetic_hf(shape: ModelShape, out: Path, arch: str = "Qwen2ForCausalLM", seed: int = 0,
                       dtype: torch.dtype = torch.bfloat16, **config_items) -> Path:
    """`shape` as a HF folder of `arch` (weights in `dtype`, as checkpoints ship), with config_items
    added to its config (e.g. rope_scaling); same seed, same weights."""
    import transformers

    config = getattr(transformers, ARCHITECTURES[arch])(
        vocab_size=shape.n_vocab, hidden_size=shape.n_embd, intermediate_size=shape.n_ff,
        num_hidden_layers=shape.n_layer, num_attention_heads=shape.n_head, num_key_value_heads=shape.n_head_kv,
        head_dim=shape.head_dim, max_position_embeddings=shape.n_ctx_train, rope_theta=shape.rope_theta,
        rms_norm_eps=shape.rms_eps, tie_word_embeddings=shape.tied_embeddings, architectures=[arch], **config_items)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    with atomic_path(out) as tmp:
        model.save_pretrained(tmp)
        qwen2_tokenizer().save_pretrained(tmp)
    return Path(out)
