"""The synthetic speed models: exact Qwen shapes, real vocabulary, deterministic bytes."""

import hashlib

import numpy as np
import pytest
from gguf import GGUFReader

from awq2gguf.assets.synthetic import SHAPES, write_synthetic_gguf


def sha(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_qwen25_05b_shape_has_the_real_parameter_count():
    # Qwen2.5-0.5B's published count (tied embeddings counted once).
    assert SHAPES["qwen2.5-0.5b"].n_params() == 494_032_768
    s = SHAPES["qwen2.5-0.5b"]
    assert (s.n_layer, s.n_embd, s.n_head, s.n_head_kv, s.n_ff, s.n_vocab) == (24, 896, 14, 2, 4864, 151936)
    assert s.tied_embeddings and not SHAPES["qwen-1.8b"].tied_embeddings


@pytest.mark.parametrize("name,published", [("qwen2.5-1.5b", 1_543_714_304), ("qwen2.5-3b", 3_085_938_688),
                                            ("qwen2.5-7b", 7_615_616_512)])
def test_bigger_qwen25_shapes_have_the_real_parameter_counts(name, published):
    assert SHAPES[name].n_params() == published


def test_same_seed_same_bytes_other_seed_other_weights(tmp_path, tiny_f16):
    again = write_synthetic_gguf(SHAPES["tiny-tied"], tmp_path / "again.gguf", seed=0)
    other = write_synthetic_gguf(SHAPES["tiny-tied"], tmp_path / "other.gguf", seed=1)
    assert sha(again) == sha(tiny_f16["tiny-tied"])
    assert sha(other) != sha(again)
    assert not (tmp_path / "again.gguf.tmp").exists()


def test_gguf_has_the_shapes_and_the_qwen2_tokenizer(tiny_f16):
    shape = SHAPES["tiny-untied"]
    reader = GGUFReader(tiny_f16["tiny-untied"])
    tensors = {t.name: t for t in reader.tensors}
    assert list(tensors) == [n for n, _ in shape.tensor_shapes()]
    for name, s in shape.tensor_shapes():
        # GGUF lists dimensions innermost first.
        assert tuple(int(d) for d in tensors[name].shape) == tuple(reversed(s)), name
    assert len(reader.fields["tokenizer.ggml.tokens"].data) == shape.n_vocab
    assert reader.fields["tokenizer.ggml.pre"].contents() == "qwen2"
    w = np.asarray(tensors["blk.0.ffn_up.weight"].data, dtype=np.float32)
    assert 0.015 < w.std() < 0.025
