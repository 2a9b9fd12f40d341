"""bench awq's imatrix variants: one llama-imatrix, then all-Q4_0 by the bench's build and stock
llama.cpp's IQ4_NL and Q4_K_M mixtures with it (the 4-bit files users compare with)."""

from gguf import GGMLQuantizationType as T
from gguf import GGUFReader

from awq2gguf.assets.synthetic import ModelShape, write_synthetic_gguf
from awq2gguf.bench.awq import IMATRIX_TYPES, imatrix_variants

# Rows of 256, so that the K-quants' super-blocks fit (narrower ones fall back to other types).
K_QUANT_SIZED = ModelShape("tiny-256", n_layer=1, n_embd=256, n_head=4, n_head_kv=2, n_ff=512, tied_embeddings=False)


def test_each_type_is_made_with_the_one_imatrix(calib_text, builds, tmp_path):
    f16 = write_synthetic_gguf(K_QUANT_SIZED, tmp_path / "f16.gguf")
    made = imatrix_variants(builds["patched"], f16, calib_text, 2, 64, tmp_path, threads=2)
    assert [m.label for m in made] == [t.label for t in IMATRIX_TYPES]
    matrices = {m.label: {t.name: t.tensor_type for t in GGUFReader(m.path).tensors if len(t.shape) == 2}
                for m in made}
    q4_0, iq4_nl, iq4_nl_pure, q4_k_m = matrices.values()
    assert set(q4_0.values()) == {T.Q4_0}  # the patched build's all-Q4_0, output and embeddings included
    assert T.IQ4_NL in set(iq4_nl.values()) and T.Q4_0 not in set(iq4_nl.values())
    assert set(iq4_nl_pure.values()) == {T.IQ4_NL} and set(iq4_nl.values()) != {T.IQ4_NL}
    assert {T.Q4_K, T.Q6_K} <= set(q4_k_m.values())  # stock's mixture: Q6_K for the output and some others
    assert all(m.seconds > 0 for m in made)
    assert not (tmp_path / "imatrix.gguf").exists()
