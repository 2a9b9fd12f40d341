"""Random-weight GGUFs with the exact shapes of real Qwen models, for speed and memory work.

Decode and prefill speed depend on tensor shapes and types, not on weight values, so a
deterministic random model of the right shape stands in for a real checkpoint in `bench`.
The tokenizer is the real Qwen2 vocabulary shipped with llama.cpp, so prompts tokenize as
they would on the real model.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType

from .gguf_write import atomic_writer, copy_fields
from ..paths import VENDOR_SRC

QWEN2_VOCAB = VENDOR_SRC / "models" / "ggml-vocab-qwen2.gguf"
N_VOCAB_QWEN2 = 151936


@dataclass(frozen=True)
class ModelShape:
    name: str
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    n_ff: int
    tied_embeddings: bool
    n_vocab: int = N_VOCAB_QWEN2
    rope_theta: float = 1_000_000.0
    rms_eps: float = 1e-6
    n_ctx_train: int = 32768

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    def tensor_shapes(self) -> list[tuple[str, tuple[int, ...]]]:
        """GGUF tensor names with numpy shapes (rows, cols), in file order."""
        e, kv, ff = self.n_embd, self.n_head_kv * self.head_dim, self.n_ff
        shapes = [("token_embd.weight", (self.n_vocab, e))]
        for i in range(self.n_layer):
            b = f"blk.{i}."
            shapes += [
                (b + "attn_norm.weight", (e,)),
                (b + "attn_q.weight", (e, e)), (b + "attn_q.bias", (e,)),
                (b + "attn_k.weight", (kv, e)), (b + "attn_k.bias", (kv,)),
                (b + "attn_v.weight", (kv, e)), (b + "attn_v.bias", (kv,)),
                (b + "attn_output.weight", (e, e)),
                (b + "ffn_norm.weight", (e,)),
                (b + "ffn_gate.weight", (ff, e)),
                (b + "ffn_up.weight", (ff, e)),
                (b + "ffn_down.weight", (e, ff)),
            ]
        shapes.append(("output_norm.weight", (e,)))
        if not self.tied_embeddings:
            shapes.append(("output.weight", (self.n_vocab, e)))
        return shapes

    def n_params(self) -> int:
        return sum(int(np.prod(s)) for _, s in self.tensor_shapes())


SHAPES = {
    s.name: s
    for s in (
        # Qwen2.5-0.5B: tied embeddings, GQA 14/2, qkv biases.
        ModelShape("qwen2.5-0.5b", n_layer=24, n_embd=896, n_head=14, n_head_kv=2, n_ff=4864,
                   tied_embeddings=True),
        # The same, twice as deep: what streaming block by block must not make cost more memory.
        ModelShape("qwen2.5-0.5b-deep", n_layer=48, n_embd=896, n_head=14, n_head_kv=2, n_ff=4864,
                   tied_embeddings=True),
        ModelShape("qwen2.5-1.5b", n_layer=28, n_embd=1536, n_head=12, n_head_kv=2, n_ff=8960,
                   tied_embeddings=True),
        ModelShape("qwen2.5-3b", n_layer=36, n_embd=2048, n_head=16, n_head_kv=2, n_ff=11008,
                   tied_embeddings=True),
        ModelShape("qwen2.5-7b", n_layer=28, n_embd=3584, n_head=28, n_head_kv=4, n_ff=18944,
                   tied_embeddings=False, n_vocab=152064),
        # Qwen(1.5)-1.8B, the shape of the seed reports: MHA, untied output.
        ModelShape("qwen-1.8b", n_layer=24, n_embd=2048, n_head=16, n_head_kv=16, n_ff=5504,
                   tied_embeddings=False),
        # Small enough for tests, same vocabulary and layout.
        ModelShape("tiny-tied", n_layer=2, n_embd=128, n_head=4, n_head_kv=2, n_ff=320,
                   tied_embeddings=True),
        ModelShape("tiny-untied", n_layer=2, n_embd=128, n_head=4, n_head_kv=2, n_ff=320,
                   tied_embeddings=False),
        # Rows of 256 for the K-quants' super-blocks (the MLP's 640 falls back), 8 blocks for the
        # mixtures' per-layer rules, 4 heads per KV head for IQ4's attn_v rule.
        ModelShape("tiny-k", n_layer=8, n_embd=256, n_head=4, n_head_kv=1, n_ff=640, tied_embeddings=True),
        ModelShape("tiny-k-untied", n_layer=8, n_embd=256, n_head=4, n_head_kv=1, n_ff=640,
                   tied_embeddings=False),
        # Deep enough to drop blocks from.
        ModelShape("tiny-deep", n_layer=6, n_embd=128, n_head=4, n_head_kv=2, n_ff=320,
                   tied_embeddings=True),
    )
}
DEFAULT_SHAPE = "qwen2.5-0.5b"


def _tensor_values(rng: np.random.Generator, name: str, shape: tuple[int, ...]) -> np.ndarray:
    if name.endswith("norm.weight"):
        return np.ones(shape, dtype=np.float32)
    values = rng.standard_normal(shape, dtype=np.float32) * np.float32(0.02)
    # 2-D weights in F16, as a converted checkpoint would be; norms and biases stay F32.
    return values.astype(np.float16) if len(shape) == 2 else values


def write_synthetic_gguf(shape: ModelShape, out: Path, seed: int = 0) -> Path:
    """Write `shape` as an F16 GGUF with N(0, 0.02) weights from `seed`; same seed, same bytes."""
    if not QWEN2_VOCAB.is_file():
        raise FileNotFoundError(f"{QWEN2_VOCAB} not found: run `make vendor` first")
    with atomic_writer(out, "qwen2") as writer:
        writer.add_name(f"synthetic {shape.name}")
        writer.add_context_length(shape.n_ctx_train)
        writer.add_embedding_length(shape.n_embd)
        writer.add_block_count(shape.n_layer)
        writer.add_feed_forward_length(shape.n_ff)
        writer.add_head_count(shape.n_head)
        writer.add_head_count_kv(shape.n_head_kv)
        writer.add_rope_freq_base(shape.rope_theta)
        writer.add_layer_norm_rms_eps(shape.rms_eps)
        writer.add_file_type(1)  # mostly F16
        copy_fields(QWEN2_VOCAB, writer, keep=lambda key: key.startswith("tokenizer."))

        # Tensor infos first, then data one tensor at a time, so memory stays at one tensor.
        shapes = shape.tensor_shapes()
        for name, s in shapes:
            dtype = np.float16 if len(s) == 2 else np.float32
            raw = GGMLQuantizationType.F16 if len(s) == 2 else GGMLQuantizationType.F32
            writer.add_tensor_info(name, s, np.dtype(dtype), int(np.prod(s)) * np.dtype(dtype).itemsize,
                                   raw_dtype=raw)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        rng = np.random.default_rng(seed)
        for name, s in shapes:
            writer.write_tensor_data(_tensor_values(rng, name, s))
    return Path(out)
