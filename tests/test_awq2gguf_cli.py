"""`awq2gguf MODEL_DIR OUT.gguf` end to end on tiny random folders of every architecture, and its errors."""

import dataclasses
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from gguf import GGMLQuantizationType, GGUFReader

from awq2gguf.assets.synthetic import SHAPES
from awq2gguf.assets.synthetic_hf import write_synthetic_hf
from awq2gguf.awq.guard import kl_divergence
from awq2gguf.cli import main
from awq2gguf.convert import convert_hf_to_gguf
from awq2gguf.llama_quantize import quantize
from awq2gguf.metadata import PREFIX, Key
from conftest import generate, llama_cpp_logits

FAST = ("--calib-samples", "4", "--calib-tokens", "64")
PROMPT_IDS = [9707, 1879, 13, 576, 3974, 13876, 38835, 34208, 916, 279, 15678, 5562]  # Qwen2 tokens


def run(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def leftovers(folder):
    return sorted(p.name for p in folder.iterdir() if ".work-" in p.name or p.name.endswith(".tmp"))


@pytest.mark.parametrize("arch,shape", [("LlamaForCausalLM", "tiny-untied"), ("Qwen2ForCausalLM", "tiny-tied"),
                                        ("Qwen3ForCausalLM", "tiny-untied"), ("Gemma3ForCausalLM", "tiny-deep"),
                                        ("Phi3ForCausalLM", "tiny-untied")])
def test_all_q4_0_gguf_that_stock_and_patched_run(tiny_hf, calib_text, builds, tmp_path, arch, shape):
    out = tmp_path / "out.gguf"
    result = run(tiny_hf(arch, shape), out, "--calib", calib_text, *FAST)
    assert result.exit_code == 0, result.output
    reader = GGUFReader(out)
    types = {t.name: t.tensor_type for t in reader.tensors if len([d for d in t.shape if d > 1]) == 2}
    assert ("output.weight" in types) == (shape == "tiny-untied")
    assert {t for t in types.values()} == {GGMLQuantizationType.Q4_0}
    meta = {k: f.contents() for k, f in reader.fields.items() if k.startswith(PREFIX)}
    assert set(meta) <= {k.gguf for k in Key}
    assert meta[Key.CALIBRATION_SOURCE.gguf] == "file:zen.txt"
    assert (meta[Key.CALIBRATION_SAMPLES.gguf], meta[Key.CALIBRATION_TOKENS.gguf]) == (4, 64)
    assert meta[Key.GROUP_SIZE.gguf] == 32 and meta[Key.CLIP.gguf] is True and meta[Key.COMPENSATE.gguf] is True
    assert meta[Key.ALPHA_GRID.gguf] == "0..1 (21 points)"
    # The final check ran on 4 held-out samples, and what was written is never worse than plain.
    assert meta[Key.CHECK_TOKENS.gguf] == 4 * 64
    assert meta[Key.CHECK_FELL_BACK.gguf] == (meta[Key.CHECK_KLD.gguf] >= meta[Key.CHECK_PLAIN_KLD.gguf])
    assert "check on held-out calibration: KLD to FP" in " ".join(result.output.split())
    for build in builds.values():
        proc = generate(build, out)
        assert proc.returncode == 0, proc.stderr[-2000:]
    assert leftovers(tmp_path) == []


def cosine(a, b) -> float:
    """The smallest, over positions, cosine similarity of two sets of centred logits."""
    a, b = a - a.mean(-1, keepdims=True), b - b.mean(-1, keepdims=True)
    return float(((a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)).min())


def fp_logits(model_dir) -> np.ndarray:
    from transformers import AutoModelForCausalLM

    with torch.no_grad():
        return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)(
            torch.tensor([PROMPT_IDS])).logits[0].numpy()


def test_self_calibrated_logits_stay_close_to_the_fp_model(tiny_hf, builds, tmp_path):
    """Default calibration (the model samples its own text), then llama.cpp's logits vs torch's FP ones."""
    model_dir = tiny_hf("Qwen2ForCausalLM", "tiny-tied")
    out = tmp_path / "out.gguf"
    result = run(model_dir, out, *FAST)
    assert result.exit_code == 0, result.output
    # 4 + 4 held-out sequences, each from one of the prompts (the default).
    assert GGUFReader(out).fields[Key.CALIBRATION_SOURCE.gguf].contents() == "generated:seed=0,prompts=8"

    fp = fp_logits(model_dir)
    f16 = convert_hf_to_gguf(model_dir, tmp_path / "f16.gguf")

    # The unquantized conversion matches torch closely: the comparison itself is sound.
    assert cosine(llama_cpp_logits(builds["patched"], f16, PROMPT_IDS), fp) > 0.999
    for build in builds.values():
        assert cosine(llama_cpp_logits(build, out, PROMPT_IDS), fp) > 0.95


# Llama 3's RoPE frequency scaling, with the original context so short that most of a tiny head's
# frequencies are scaled.
LLAMA3_ROPE = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 16}


def test_llama3_rope_scaling_and_a_tied_output_as_in_llama_3_2(builds, tmp_path):
    """The llama3 frequency scaling reaches the GGUF (its rope_freqs tensor) and both builds apply it."""
    model_dir = write_synthetic_hf(SHAPES["tiny-tied"], tmp_path / "llama3", "LlamaForCausalLM",
                                   rope_scaling=LLAMA3_ROPE)
    unscaled_dir = write_synthetic_hf(SHAPES["tiny-tied"], tmp_path / "unscaled", "LlamaForCausalLM")
    out = tmp_path / "out.gguf"
    result = run(model_dir, out, *FAST)
    assert result.exit_code == 0, result.output
    names = {t.name for t in GGUFReader(out).tensors}
    assert "rope_freqs.weight" in names and "output.weight" not in names

    fp = fp_logits(model_dir)
    # Same weights, so the scaling alone moves the logits (1 - cosine about 2e-4 in a random model);
    # the F16 conversion must be a hundred times closer to the scaled model than that (about 2e-7).
    scaling = 1 - cosine(fp_logits(unscaled_dir), fp)
    f16 = convert_hf_to_gguf(model_dir, tmp_path / "f16.gguf")
    for build in builds.values():
        assert 1 - cosine(llama_cpp_logits(build, f16, PROMPT_IDS), fp) < 0.01 * scaling
    for build in builds.values():
        assert cosine(llama_cpp_logits(build, out, PROMPT_IDS), fp) > 0.95


def kl_to(fp: np.ndarray, logits: np.ndarray) -> float:
    """Mean KL divergence of logits' next-token distributions from fp's (a random model's logits
    are nearly flat, so their cosine says little and their KL divergence is small)."""
    return kl_divergence(torch.tensor(fp).log_softmax(-1), torch.tensor(logits).log_softmax(-1))


# Phi-3's longrope (as in Phi-3-mini-128k, Phi-3.5 and Phi-4-mini), with distinct per-frequency
# factors. llama.cpp picks the long ones when its context (at least 256) exceeds the original one,
# transformers when the sequence does: with an original context of 512 both take the short ones.
LONGROPE = {"rope_type": "longrope", "rope_theta": 10000.0,
            "short_factor": [1.0 + 0.2 * i for i in range(SHAPES["tiny-untied"].head_dim // 2)],
            "long_factor": [2.0 + 0.4 * i for i in range(SHAPES["tiny-untied"].head_dim // 2)]}
PHI3_CONTEXTS = {"original_max_position_embeddings": 512, "max_position_embeddings": 4096}


@pytest.mark.parametrize("arch,shape,items", [
    # six layers: five with an 8-token sliding window and RoPE base 10^4, one global with 10^6,
    # which llama.cpp assumes of every Gemma 3; (1 + w) norms, sandwich norms, embeddings x sqrt(128)
    ("Gemma3ForCausalLM", "tiny-deep", {}),
    ("Phi3ForCausalLM", "tiny-untied", {"rope_parameters": LONGROPE, **PHI3_CONTEXTS}),
])
def test_new_architectures_in_llama_cpp_agree_with_the_hf_model(calib_text, builds, tmp_path, arch, shape, items):
    """The F16 conversion of each runs in both builds as transformers runs it; awq2gguf's all-Q4_0
    file stays near plain all-Q4_0's distance to the FP model on a prompt unlike its calibration
    text (measured 0.99x for Gemma 3, 1.25x for Phi-3: scales searched on one random text need not
    help on another). The folds themselves are checked in test_awq_fold."""
    model_dir = write_synthetic_hf(SHAPES[shape], tmp_path / arch, arch, **items)
    out = tmp_path / "out.gguf"
    result = run(model_dir, out, "--calib", calib_text, *FAST)
    assert result.exit_code == 0, result.output
    fp = fp_logits(model_dir)
    f16 = convert_hf_to_gguf(model_dir, tmp_path / "f16.gguf")
    plain = quantize(builds["patched"], f16, tmp_path / "plain.gguf", "Q4_0")
    for build in builds.values():
        # measured 1.8e-7 (Gemma 3) and 2.3e-7 (Phi-3); the longrope factors alone move it 4e-6
        assert kl_to(fp, llama_cpp_logits(build, f16, PROMPT_IDS)) < 1e-6
        plain_kl, kl = (kl_to(fp, llama_cpp_logits(build, f, PROMPT_IDS)) for f in (plain, out))
        assert kl < 1.5 * plain_kl, (build.name, kl, plain_kl)


def test_untie_output_adds_a_separate_output_matrix(tiny_hf, calib_text, tmp_path):
    out = tmp_path / "out.gguf"
    result = run(tiny_hf("Qwen2ForCausalLM", "tiny-tied"), out, "--calib", calib_text, "--untie-output", *FAST)
    assert result.exit_code == 0, result.output
    reader = GGUFReader(out)
    names = {t.name: t.tensor_type for t in reader.tensors}
    assert names["output.weight"] == names["token_embd.weight"] == GGMLQuantizationType.Q4_0
    assert reader.fields[Key.UNTIE_OUTPUT.gguf].contents() is True


@pytest.mark.parametrize("arch,shape", [("Qwen2ForCausalLM", "tiny-tied"), ("LlamaForCausalLM", "tiny-untied")])
def test_output_type_q8_0_keeps_the_output_matrix_in_q8_0(tiny_hf, calib_text, builds, tmp_path, arch, shape):
    """--output-type q8_0: the output matrix (a tied model's token_embd) is ggml's Q8_0 of the
    model's own, every other matrix Q4_0; the file is larger by what the command says, records the
    choice, and is nearer the FP model than the all-Q4_0 file made the same way."""
    model_dir = tiny_hf(arch, shape)
    files = {kind: tmp_path / f"{kind}.gguf" for kind in ("q4_0", "q8_0")}
    printed = {}
    for kind, out in files.items():
        result = run(model_dir, out, "--calib", calib_text, "--output-type", kind, *FAST)
        assert result.exit_code == 0, result.output
        printed[kind] = " ".join(result.output.split())
        assert GGUFReader(out).fields[Key.OUTPUT_TYPE.gguf].contents() == kind
    reader = GGUFReader(files["q8_0"])
    output = "token_embd.weight" if shape == "tiny-tied" else "output.weight"
    types = {t.name: t.tensor_type for t in reader.tensors if len([d for d in t.shape if d > 1]) == 2}
    assert types.pop(output) == GGMLQuantizationType.Q8_0
    assert set(types.values()) == {GGMLQuantizationType.Q4_0}
    # Nothing searched or folded into it: exactly the Q8_0 of the checkpoint's F16-rounded matrix.
    from safetensors.torch import load_file
    from awq2gguf.q8_0 import q8_0_fake_quant
    from gguf.quants import dequantize

    tensors = load_file(model_dir / "model.safetensors")
    fp = tensors.get("lm_head.weight", tensors["model.embed_tokens.weight"]).float().half().float()
    stored = next(t for t in reader.tensors if t.name == output)
    assert np.array_equal(dequantize(stored.data, stored.tensor_type).reshape(fp.shape), q8_0_fake_quant(fp).numpy())
    extra = fp.numel() // 32 * (34 - 18)
    assert abs(files["q8_0"].stat().st_size - files["q4_0"].stat().st_size - extra) < 64
    assert f"output matrix in Q8_0: {extra / 2**20:.1f} MiB of it" in printed["q8_0"]
    fp_out = fp_logits(model_dir)
    for build in builds.values():
        kl4, kl8 = (kl_to(fp_out, llama_cpp_logits(build, f, PROMPT_IDS)) for f in files.values())
        assert kl8 < kl4, (build.name, kl8, kl4)


def test_a_search_that_loses_the_final_check_writes_plain_q4_0(tiny_hf, calib_text, builds, tmp_path, monkeypatch):
    """Whatever the search did, if the model is further from FP than plain Q4_0 on the held-out
    samples, OUT is plain Q4_0 of the original weights, and says so."""
    from awq2gguf.awq import apply
    from awq2gguf.llama_quantize import quantize

    choose = apply._choose_block

    def harmful(layer, *args, **kwargs):
        chosen = choose(layer, *args, **kwargs)
        layer.mlp.down_proj.weight.mul_(1.5)  # a wrong function, far from FP
        return chosen

    monkeypatch.setattr(apply, "_choose_block", harmful)
    model_dir = tiny_hf("LlamaForCausalLM", "tiny-untied")
    out = tmp_path / "out.gguf"
    result = run(model_dir, out, "--calib", calib_text, *FAST)
    assert result.exit_code == 0, result.output
    assert "lost: wrote plain rounding" in " ".join(result.output.split())  # rich wraps lines
    reader = GGUFReader(out)
    assert reader.fields[Key.CHECK_FELL_BACK.gguf].contents() is True
    plain = GGUFReader(quantize(builds["patched"], convert_hf_to_gguf(model_dir, tmp_path / "f32.gguf", "f32"),
                                tmp_path / "plain.gguf", "Q4_0"))
    expected = {t.name: np.asarray(t.data) for t in plain.tensors}
    for t in reader.tensors:
        assert np.array_equal(np.asarray(t.data), expected[t.name]), t.name


def _broken(tiny_hf, tmp_path, how):
    src = tiny_hf("Qwen2ForCausalLM", "tiny-tied")
    d = tmp_path / "model"
    shutil.copytree(src, d)
    config = json.loads((d / "config.json").read_text())
    if how == "no config":
        (d / "config.json").unlink()
    elif how == "bad json":
        (d / "config.json").write_text("{ not json")
    elif how == "gpt2":
        (d / "config.json").write_text(json.dumps(dict(config, architectures=["GPT2LMHeadModel"])))
    elif how == "no weights":
        (d / "model.safetensors").unlink()
    elif how == "corrupt weights":
        data = (d / "model.safetensors").read_bytes()
        (d / "model.safetensors").write_bytes(data[:len(data) // 2])
    elif how == "missing tensor":
        from safetensors.torch import load_file, save_file
        tensors = load_file(d / "model.safetensors")
        del tensors["model.layers.1.mlp.down_proj.weight"]
        save_file(tensors, d / "model.safetensors", metadata={"format": "pt"})
    elif how == "bad tokenizer":
        (d / "tokenizer.json").write_text("{")
    return d


@pytest.mark.parametrize("how,message", [
    ("no config", "has no config.json: not a Hugging Face model folder"),
    ("bad json", "config.json is not valid JSON"),
    ("gpt2", "architecture GPT2LMHeadModel is not supported; supported: LlamaForCausalLM, MistralForCausalLM, "
             "Qwen2ForCausalLM, Qwen3ForCausalLM, Gemma3ForCausalLM, Phi3ForCausalLM"),
    ("no weights", "has no weights (*.safetensors or pytorch_model*.bin)"),
    ("corrupt weights", "model.safetensors is truncated or corrupt"),
    ("missing tensor", "lack 1 tensors, e.g. model.layers.1.mlp.down_proj.weight"),
    ("bad tokenizer", "does not load"),
])
def test_bad_model_folder_gets_one_line_and_no_output(tiny_hf, calib_text, tmp_path, how, message):
    model_dir = _broken(tiny_hf, tmp_path, how)
    out = tmp_path / "out.gguf"
    result = run(model_dir, out, "--calib", calib_text, *FAST)
    assert result.exit_code == 1
    assert message in result.output and "Traceback" not in result.output
    assert not out.exists() and leftovers(tmp_path) == []


def test_sigterm_mid_job_leaves_nothing_behind(tiny_hf, calib_text, tmp_path):
    """A job stopped by SIGTERM (a service manager's stop, `kill`) once its work folder exists exits
    143 and leaves neither that folder nor OUT."""
    out = tmp_path / "out.gguf"
    cli = Path(sys.executable).with_name("awq2gguf")
    job = subprocess.Popen([str(cli), str(tiny_hf("Qwen2ForCausalLM", "tiny-tied")), str(out), "--calib",
                            str(calib_text), *FAST], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while not leftovers(tmp_path) and job.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert leftovers(tmp_path), "the job ended before its work folder appeared"
        job.send_signal(signal.SIGTERM)
        output, _ = job.communicate(timeout=60)
    finally:
        job.kill()
    assert job.returncode == 143, output
    assert not out.exists() and leftovers(tmp_path) == []


def test_too_little_disk_fails_before_the_slow_work(tiny_hf, calib_text, tmp_path, monkeypatch):
    from awq2gguf import pipeline

    free = shutil.disk_usage(tmp_path)._replace(free=10 * 2**20)
    monkeypatch.setattr(pipeline.shutil, "disk_usage", lambda path: free)
    out = tmp_path / "out.gguf"
    result = run(tiny_hf("Qwen2ForCausalLM", "tiny-tied"), out, "--calib", calib_text, *FAST)
    assert result.exit_code == 1
    assert f"not enough free disk beside {out}" in " ".join(result.output.split()), result.output
    assert "0.0 GiB are free" in " ".join(result.output.split())
    assert not out.exists() and leftovers(tmp_path) == []


def test_bad_calibration_and_output_paths(tiny_hf, calib_text, tmp_path):
    model_dir = tiny_hf("Qwen2ForCausalLM", "tiny-tied")
    out = tmp_path / "out.gguf"
    cases = [
        (("--calib", calib_text, "--calib-samples", "64", "--calib-tokens", "512"),
         "64 + 4 held-out samples of 512 tokens need 34816. Give more text, or lower --calib-samples / "
         "--calib-held-out / --calib-tokens"),
        (("--calib", tmp_path / "missing.txt"), "missing.txt does not exist"),
    ]
    bad_jsonl = tmp_path / "bad.jsonl"
    bad_jsonl.write_text('{"text": "fine"}\n{"content": "no text field"}\n')
    cases.append((("--calib", bad_jsonl), 'bad.jsonl:2: expected a JSON object with a "text" field'))
    for args, message in cases:
        result = run(model_dir, out, *args)
        assert result.exit_code == 1 and message in result.output, result.output
    result = run(model_dir, tmp_path / "no-such-dir" / "out.gguf", "--calib", calib_text, *FAST)
    assert result.exit_code == 1 and "no-such-dir" in result.output and "does not exist" in result.output
    assert not out.exists() and leftovers(tmp_path) == []
    result = run(tmp_path / "nowhere", out)
    assert result.exit_code == 1 and "nowhere is not a directory" in result.output
    result = run(model_dir, out, "--calib", calib_text, "--alpha-steps", "-1")
    assert result.exit_code == 2 and "needs 0 steps (no scales) or more" in result.output, result.output


def test_a_tokenizer_with_ids_past_the_vocabulary_gets_one_line(tmp_path, calib_text):
    """Qwen2's tokenizer on a model with a 1024-token vocabulary: its text, and its own prompts
    when it samples, have ids the model has no embedding for."""
    model_dir = write_synthetic_hf(dataclasses.replace(SHAPES["tiny-tied"], n_vocab=1024), tmp_path / "small-vocab")
    for args in (("--calib", calib_text), ()):
        result = run(model_dir, tmp_path / "out.gguf", *args, *FAST)
        assert result.exit_code == 1, result.output
        assert "past the model's vocabulary of 1024: the folder's tokenizer does not belong with its weights" in \
            " ".join(result.output.split()), result.output
    assert leftovers(tmp_path) == [] and not (tmp_path / "out.gguf").exists()


def test_jsonl_calibration_reads_the_text_fields(tiny_hf, calib_text, tmp_path):
    from awq2gguf.calibration import from_file
    from awq2gguf.checkpoint import load_tokenizer

    jsonl = tmp_path / "calib.jsonl"
    jsonl.write_text("".join(json.dumps({"text": p}) + "\n" for p in calib_text.read_text().split("\n\n") if p))
    tokenizer = load_tokenizer(tiny_hf("Qwen2ForCausalLM", "tiny-tied"))
    calib = from_file(tokenizer, jsonl, 4, 64)
    assert calib.input_ids.shape == (4, 64)
    assert "Beautiful is better than ugly" in tokenizer.decode(calib.input_ids[0])


def test_self_sampled_tokens_follow_the_whole_distribution_and_never_end_a_sequence():
    """Each token comes from the model's whole next-token distribution: the tail a top-k would cut
    is sampled at its own rate; end-of-generation tokens never are."""
    from awq2gguf.calibration_worker import sample_next

    logits = np.zeros(100, dtype=np.float32)
    logits[:2] = 3.0  # two likely tokens and a tail of 98
    banned = np.array([99])
    rng = np.random.default_rng(0)
    counts = np.bincount([sample_next(logits, banned, rng) for _ in range(20000)], minlength=100)
    want = np.exp(logits.astype(np.float64))
    want[banned] = 0.0
    want /= want.sum()
    assert counts[99] == 0 and (counts[2:99] > 0).all()
    assert np.abs(counts / counts.sum() - want).max() < 0.01
    assert logits[99] == 0.0  # llama.cpp's logits buffer is left as it was


def test_self_sampled_calibration_starts_from_openings_and_chat_prompts_in_turn(tiny_hf, builds, tmp_path):
    from awq2gguf.calibration import MIN_ANSWER, generated, prompt_ids, start_texts
    from awq2gguf.checkpoint import load_tokenizer

    model_dir = tiny_hf("Qwen2ForCausalLM", "tiny-tied")
    tokenizer = load_tokenizer(model_dir)
    prompts = prompt_ids(tokenizer, 3, 64)
    f16 = convert_hf_to_gguf(model_dir, tmp_path / "f16.gguf")
    calib = generated(builds["patched"], f16, 2, 64, 0, 1, n_held_out=1, prompts=prompts)
    assert calib.input_ids.shape == (3, 64) and calib.n_samples == 2 and calib.source == "generated:seed=0,prompts=3"
    starts = start_texts(3)
    assert [chat for _, chat in starts] == [False, True, False]
    for row, prompt, (text, chat) in zip(calib.input_ids.tolist(), prompts, starts):
        assert row[:len(prompt)] == prompt  # each sequence is its start, then the model's continuation
        start = tokenizer.decode(prompt)
        if chat:
            assert text in start and "<|im_start|>assistant" in start
        else:  # plain text, cut to leave room for the continuation
            assert text.startswith(start) and len(prompt) <= 64 - MIN_ANSWER and "<|im_start|>" not in start
