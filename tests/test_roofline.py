"""Roofline arithmetic on fixed inputs."""

import pytest
from gguf import GGMLQuantizationType as T

from awq2gguf.bench.roofline import (Int8Peak, decode_bytes_per_token, int8_ops_per_cycle,
                                     prefill_ops_per_token)
from awq2gguf.bench.gguf_tensors import TensorInfo

# A two-matrix model with a 10-token vocabulary and hidden size 64.
EMBD = TensorInfo("token_embd.weight", (64, 10), T.Q4_0)     # 10 rows x 2 blocks x 18 bytes = 360
W = TensorInfo("blk.0.ffn_up.weight", (64, 128), T.Q8_0)     # 128 rows x 2 blocks x 34 bytes = 8704
NORM = TensorInfo("blk.0.attn_norm.weight", (64,), T.F32)    # 256
OUT = TensorInfo("output.weight", (64, 10), T.Q8_0)          # 10 x 68 = 680


def test_tensor_sizes():
    assert (EMBD.n_bytes, W.n_bytes, NORM.n_bytes, OUT.n_bytes) == (360, 8704, 256, 680)


def test_tied_embedding_is_read_whole_as_the_output_matrix():
    assert decode_bytes_per_token([EMBD, W, NORM]) == 360 + 8704 + 256


def test_untied_embedding_is_one_row_lookup():
    assert decode_bytes_per_token([EMBD, W, NORM, OUT]) == 36 + 8704 + 256 + 680


def test_prefill_ops_count_weight_matmuls_but_not_output():
    assert prefill_ops_per_token([EMBD, W, NORM, OUT]) == 2 * 64 * 128


def test_int8_peak():
    assert int8_ops_per_cycle("GenuineIntel", {"avx2", "avx512_vnni"}, "x86_64")[0] == 256
    assert int8_ops_per_cycle("AuthenticAMD", {"avx2", "avx512_vnni"}, "x86_64", 25)[0] == 128  # Zen 4
    assert int8_ops_per_cycle("AuthenticAMD", {"avx2", "avx512_vnni"}, "x86_64", 26)[0] == 256  # Zen 5
    assert int8_ops_per_cycle("GenuineIntel", {"avx2", "avx_vnni"}, "x86_64")[0] == 128
    assert int8_ops_per_cycle("", {"asimd", "asimddp", "i8mm"}, "aarch64")[0] == 128
    assert Int8Peak(128, 2.5, 2, "").gops == pytest.approx(640.0)


def test_fractions_on_fixed_numbers(tmp_path, monkeypatch):
    from awq2gguf.bench import roofline

    monkeypatch.setattr(roofline, "read_tensor_infos", lambda _: [EMBD, W, NORM])
    r = roofline.fractions(tmp_path / "m.gguf", bandwidth_gbs=[9.32e-6, 3 * 9.32e-6, 9.32e-6],
                           peak=Int8Peak(1, 1e-9 * 16384, 1, ""), decode_tps=[0.5, 0.6, 0.7], prefill_tps=0.25)
    # bounds = 9320 B/s / 9320 B = 1 token/s, then 3, then 1: each repetition against its own,
    # fractions 0.5, 0.2, 0.7; 16384 ops/s / 16384 ops = 1 token/s
    assert r["decode_bound_tps"] == pytest.approx(1.0) and r["decode_fraction"] == pytest.approx(0.5)
    assert r["prefill_bound_tps"] == pytest.approx(1.0) and r["prefill_fraction"] == pytest.approx(0.25)


def test_simd_level_named_in_reports():
    from awq2gguf.host import CpuInfo

    zen4 = {"avx2", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "avx512cd"}
    assert CpuInfo("AuthenticAMD", "AMD EPYC", frozenset(zen4), 3.0).simd == "AVX-512 F/BW/VL/VNNI/BF16"
    assert CpuInfo("AuthenticAMD", "AMD EPYC", frozenset({"avx2", "f16c"}), 3.0).simd == "AVX2, no AVX-512"
    assert CpuInfo("", "", frozenset({"asimd", "asimddp", "i8mm", "sve"}), 0.0).simd == "asimd, asimddp, i8mm, sve"


def test_kernel_isa_is_what_each_native_build_was_compiled_for(builds):
    from awq2gguf.host import cpu_info
    from awq2gguf.bench.roofline import kernel_isa

    flags = cpu_info().flags
    expected = ("AVX-512 VNNI" if {"avx512f", "avx512_vnni"} <= flags else "AVX-512" if "avx512f" in flags
                else "AVX2")
    assert {name: kernel_isa(b) for name, b in builds.items()} == {"stock": expected, "patched": expected}


def test_an_amd_cpu_is_named_with_its_family():
    """A VM's "AMD EPYC" does not tell Zen 4 (family 25) from Zen 5 (26): reports name the family."""
    from awq2gguf.host import CpuInfo

    flags = frozenset({"avx2", "avx512f", "avx512bw"})
    assert CpuInfo("AuthenticAMD", "AMD EPYC", flags, 3.0, 26).describe().startswith("AMD EPYC (family 26), ")
    assert "family" not in CpuInfo("GenuineIntel", "Intel Xeon", flags, 3.0, 6).describe()
