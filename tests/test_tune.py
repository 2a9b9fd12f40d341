"""Quantization-aware tuning (--tune-steps): the teacher and the loss against brute force, tuning
lowers the loss, and the tuned GGUF is exactly the trained model (its Q4_0 blocks are q4_0.py's
of the tuned weights, its logits the fake-quantized model's in both builds)."""

import copy
import math

import gguf
import numpy as np
import pytest
import torch
from click.testing import CliRunner
from gguf import GGUFReader
from gguf.quants import quantize
from torch import nn
from torch.nn import functional as F
from transformers import AutoModelForCausalLM

from awq2gguf import tune, tune_blocks
from awq2gguf.checkpoint import copy_other_files
from awq2gguf.cli import main
from awq2gguf.metadata import Key
from awq2gguf.modes import TuneLoss, TuneParams
from awq2gguf.q4_0 import q4_0_fake_quant
from conftest import f16_rounded_model, llama_cpp_logits

TOKENS = [9707, 1879, 13, 576, 3974, 13876, 38835, 34208, 916, 279, 15678, 5562]


def ids(n_samples=4, n_tokens=32, seed=1):
    return torch.randint(0, 5000, (n_samples, n_tokens), generator=torch.Generator().manual_seed(seed))


def fake_quantized(model: nn.Module) -> nn.Module:
    """A copy with every matrix (embeddings and output included) at its Q4_0 values: the GGUF's model."""
    q = copy.deepcopy(model)
    with torch.no_grad():
        for p in q.parameters():
            if p.dim() == 2:
                p.copy_(q4_0_fake_quant(p))
    return q


def loss_of(model: nn.Module, input_ids: torch.Tensor, teacher: tune.Teacher) -> float:
    with torch.no_grad():
        return tune.distill_loss(fake_quantized(model)(input_ids).logits, teacher, torch.arange(len(input_ids))).item()


def _gguf_tensors(path) -> dict[str, np.ndarray]:
    return {t.name: np.asarray(t.data) for t in GGUFReader(path).tensors}


def kl(p: torch.Tensor, q: torch.Tensor) -> float:
    return (p.exp() * (p - q)).sum(-1).mean().item()


def _peaked(source, out):
    """The tiny model with peaked next-token distributions, so that Q4_0 moves them (a random
    model's are nearly uniform)."""
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    with torch.no_grad():
        if model.lm_head.weight is model.model.embed_tokens.weight:
            model.lm_head.weight.mul_(5)  # x10 would leave all the mass on one token
        else:
            model.model.embed_tokens.weight.mul_(10)
            model.lm_head.weight.mul_(20)
    model.save_pretrained(out)
    copy_other_files(source, out)  # the tokenizer
    return out


@pytest.fixture(scope="module")
def model_dir(tiny_hf, tmp_path_factory):
    """A tiny Qwen2 (biases, an output matrix of its own), peaked."""
    return _peaked(tiny_hf("Qwen2ForCausalLM", "tiny-untied"), tmp_path_factory.mktemp("peaked") / "model")


@pytest.fixture(scope="module")
def tied_model_dir(tiny_hf, tmp_path_factory):
    """A tiny Qwen2 whose output matrix is the embedding table, peaked."""
    return _peaked(tiny_hf("Qwen2ForCausalLM", "tiny-tied"), tmp_path_factory.mktemp("peaked-tied") / "model")


def test_teacher_keeps_the_top_k_and_the_rest_of_the_fp_distribution(model_dir):
    model, x = f16_rounded_model(model_dir), ids(2, 16)
    got = tune.teacher(model, x)
    with torch.no_grad():
        full = F.log_softmax(model(x).logits, -1)
    top = full.topk(tune.TOP_K, dim=-1)
    # model_log_probs keeps FP16 log-probabilities: a few thousandths at these magnitudes
    torch.testing.assert_close(got.top_log_probs, top.values, atol=1e-2, rtol=0)
    torch.testing.assert_close(full.gather(-1, got.top_ids), top.values, atol=1e-2, rtol=0)
    rest = full.scatter(-1, top.indices, -math.inf).logsumexp(-1)
    torch.testing.assert_close(got.rest_log_prob, rest, atol=1e-2, rtol=0)
    torch.testing.assert_close(got.target_log_prob, full[:, :-1].gather(-1, x[:, 1:, None])[..., 0], atol=1e-2,
                               rtol=0)


@pytest.mark.parametrize("loss", TuneLoss.values())
def test_distill_loss_is_the_kl_over_the_top_k_and_the_rest(loss):
    g, vocab = torch.Generator().manual_seed(0), 4 * tune.TOP_K
    teacher_lp = F.log_softmax(3 * torch.randn(3, 10, vocab, generator=g), -1)
    student = 3 * torch.randn(3, 10, vocab, generator=g)
    x = torch.randint(0, vocab, (3, 10), generator=g)
    top = teacher_lp.topk(tune.TOP_K, dim=-1)
    rest = teacher_lp.scatter(-1, top.indices, -math.inf).logsumexp(-1)
    target = teacher_lp[:, :-1].gather(-1, x[:, 1:, None])[..., 0]
    teacher = tune.Teacher(top.values, top.indices, rest, target)
    rows = torch.tensor([2, 0])
    want = []
    for r in rows.tolist():
        s = F.log_softmax(student[r], -1)
        per_token = []
        for t in range(9):  # the last position has no next token
            p = torch.cat([teacher_lp[r, t, top.indices[r, t]].exp(), rest[r, t, None].exp()])
            outside = torch.ones(vocab, dtype=torch.bool)
            outside[top.indices[r, t]] = False
            q = torch.cat([s[t, top.indices[r, t]].exp(), s[t, outside].exp().sum()[None]])
            per_token.append((p * (p.log() - q.log())).sum())
        per_token = torch.stack(per_token)
        ce = -teacher_lp[r, torch.arange(9), x[r, 1:]]
        weight = torch.softmax(ce / tune.TSLD_TEMPERATURE, 0) if loss == "tsld" else torch.full((9,), 1 / 9)
        want.append((weight * per_token).sum())
    got = tune.distill_loss(student[rows], teacher, rows, loss)
    torch.testing.assert_close(got, torch.stack(want).mean(), rtol=1e-4, atol=1e-6)
    assert tune.distill_loss(teacher_lp[rows], teacher, rows, loss).abs() < 1e-5  # the teacher itself: 0


@pytest.mark.parametrize("params", TuneParams.values())
def test_tuning_lowers_the_distillation_loss(model_dir, params):
    fp, x = f16_rounded_model(model_dir), ids()
    teacher = tune.teacher(fp, x)
    student = fake_quantized(fp)  # where AWQ leaves it: on the grid
    before = loss_of(student, x, teacher)
    matrices = {n: p.clone() for n, p in student.named_parameters() if p.dim() == 2}
    losses = tune.tune(student, x, teacher, steps=8, lr=3e-4 if params == "all" else 1e-2, params=params)
    after = loss_of(student, x, teacher)
    assert losses[0] == pytest.approx(before, rel=1e-4)  # the first step's loss is the start's
    assert after < 0.9 * before, (before, after, losses)
    moved = [n for n, p in student.named_parameters() if p.dim() == 2 and not torch.equal(p, matrices[n])]
    if params == "all":
        assert moved and all(".layers." in n for n in moved)  # untied embeddings and output matrix stay
    else:
        assert moved == []
    assert not any(p.requires_grad for p in student.parameters())


def test_each_step_trains_the_q4_0_round_trip_of_the_latent_weights(model_dir):
    """The loss a step reports is that of the Q4_0 model of the latent weights the steps before
    left, not of the latent weights themselves."""
    fp, x = f16_rounded_model(model_dir), ids()
    teacher = tune.teacher(fp, x)
    one, two = fake_quantized(fp), fake_quantized(fp)
    tune.tune(one, x, teacher, steps=1, lr=1e-3)  # the first step of two, alone: the same schedule
    losses = tune.tune(two, x, teacher, steps=2, lr=1e-3)
    assert losses[1] == pytest.approx(loss_of(one, x, teacher), rel=1e-5)
    with torch.no_grad():
        latent = tune.distill_loss(one(x).logits, teacher, torch.arange(len(x))).item()
    assert latent != pytest.approx(losses[1], rel=1e-3)


@pytest.mark.parametrize("which", ["model_dir", "tied_model_dir"])
def test_tuned_gguf_is_the_trained_model(which, request, calib_text, builds, tmp_path, monkeypatch):
    """awq2gguf --tune-steps, the trained model caught as tune.tune leaves it: OUT's Q4_0 blocks
    (block matrices, and the embedding table when it is the output matrix too) are gguf.quants'
    (ggml's) of its weights, its norms and biases are the trained ones, an untied output matrix and
    embedding table are as AWQ left them, and both builds give the fake-quantized model's logits."""
    model_dir, tied = request.getfixturevalue(which), which == "tied_model_dir"
    caught = {}

    def catching(model, *args, **kwargs):
        caught["before"] = {n: p.detach().clone() for n, p in model.state_dict().items()}
        losses = tune_tune(model, *args, **kwargs)
        caught["after"] = {n: p.detach().clone() for n, p in model.state_dict().items()}
        return losses
    tune_tune = tune.tune
    monkeypatch.setattr(tune, "tune", catching)
    out = tmp_path / "out.gguf"
    result = CliRunner().invoke(main, [str(model_dir), str(out), "--calib", str(calib_text), "--tune-steps", "6",
                                       "--tune-lr", "0.5", "--calib-samples", "4", "--calib-tokens", "64",
                                       "--calib-held-out", "0"])
    assert result.exit_code == 0, result.output
    assert "distillation loss" in result.output
    before, after = caught["before"], caught["after"]
    reader = GGUFReader(out)
    meta = {k: f.contents() for k, f in reader.fields.items()}
    assert meta[Key.TUNE_STEPS.gguf] == 6 and meta[Key.TUNE_PARAMS.gguf] == "all"
    # the learning rate is in grid steps: half the median Q4_0 scale of the block matrices tuned
    scales = torch.cat([w.reshape(-1, 32).abs().amax(1) / 8 for n, w in before.items()
                        if ".layers." in n and w.dim() == 2])
    assert meta[Key.TUNE_LR_WEIGHTS.gguf] == pytest.approx(0.5 * scales.median().item(), rel=1e-5)
    tensors = {t.name: t for t in reader.tensors}
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN2, len([n for n in after if n.endswith("input_layernorm.weight")]))
    changed = 0
    for name, w in after.items():
        if ".layers." not in name:
            continue
        t = tensors[names.get_name(name, try_suffixes=(".weight", ".bias"))]
        if w.dim() == 2:
            assert t.tensor_type == gguf.GGMLQuantizationType.Q4_0, name
            want = quantize(w.numpy(), gguf.GGMLQuantizationType.Q4_0)
            assert np.array_equal(np.asarray(t.data).reshape(want.shape), want), name
            changed += not torch.equal(q4_0_fake_quant(w), q4_0_fake_quant(before[name]))
        else:
            assert np.array_equal(np.asarray(t.data).reshape(-1), w.numpy().reshape(-1)), name
    assert changed > 0  # the tuning moved weights across the grid
    outer = {"model.embed_tokens.weight": "token_embd.weight"}
    outer |= {} if tied else {"lm_head.weight": "output.weight"}
    assert ("output.weight" in tensors) != tied
    for name, key in outer.items():
        want = quantize(after[name].numpy(), gguf.GGMLQuantizationType.Q4_0)
        assert np.array_equal(np.asarray(tensors[key].data).reshape(want.shape), want), name
        trained = not torch.equal(q4_0_fake_quant(after[name]), q4_0_fake_quant(before[name]))
        assert trained == tied, name
    model = f16_rounded_model(model_dir)
    model.load_state_dict(after)
    with torch.no_grad():
        want = F.log_softmax(fake_quantized(model)(torch.tensor([TOKENS])).logits[0], -1)
        untuned = copy.deepcopy(model)
        untuned.load_state_dict(before)
        assert kl(want, F.log_softmax(fake_quantized(untuned)(torch.tensor([TOKENS])).logits[0], -1)) > 5e-3
    for build in builds.values():
        got = F.log_softmax(torch.from_numpy(np.asarray(llama_cpp_logits(build, out, TOKENS))).float(), -1)
        assert kl(want, got) < 1e-3, build.name


def test_a_tied_output_matrix_trains_as_the_embedding_table(tied_model_dir):
    """Tied: the one table is both the lookup and the output matrix; it trains through the quantizer
    in both uses and stays one tensor."""
    fp, x = f16_rounded_model(tied_model_dir), ids()
    teacher = tune.teacher(fp, x)
    student = fake_quantized(fp)
    before = loss_of(student, x, teacher)
    start = student.model.embed_tokens.weight.detach().clone()
    tune.tune(student, x, teacher, steps=8, lr=3e-4)
    assert student.lm_head.weight is student.model.embed_tokens.weight
    assert not torch.equal(q4_0_fake_quant(student.model.embed_tokens.weight), start)
    assert loss_of(student, x, teacher) < 0.9 * before


@pytest.mark.parametrize("args", [["--qtype", "Q8_0"], ["--build", "stock"], ["--engine", "autoawq"]])
def test_tuning_other_files_is_refused_before_any_work(model_dir, calib_text, tmp_path, args):
    out = tmp_path / "out.gguf"
    result = CliRunner().invoke(main, [str(model_dir), str(out), "--calib", str(calib_text), "--tune-steps", "2",
                                       *args])
    assert result.exit_code != 0
    assert "--tune-steps trains on a 4- or 5-bit grid: it needs --engine awq2gguf and --qtype Q4_0 (with --build " \
           "patched) or one of Q4_K_S" in " ".join(result.output.split())
    assert list(tmp_path.iterdir()) == []


def test_tuning_that_loses_the_check_leaves_the_untuned_model(model_dir, calib_text, tmp_path):
    """A learning rate that wrecks the model: the held-out check sees the tuned model lose to the
    untuned one, and OUT holds exactly what awq2gguf writes without tuning."""
    common = [str(model_dir), "--calib", str(calib_text), "--calib-samples", "4", "--calib-tokens", "64",
              "--calib-held-out", "2"]
    runner = CliRunner()
    untuned, tuned = tmp_path / "untuned.gguf", tmp_path / "tuned.gguf"
    result = runner.invoke(main, [common[0], str(untuned), *common[1:]])
    assert result.exit_code == 0, result.output
    result = runner.invoke(main, [common[0], str(tuned), *common[1:], "--tune-steps", "2", "--tune-lr", "50"])
    assert result.exit_code == 0, result.output
    assert "lost: kept the untuned model" in result.output
    meta = {k: f.contents() for k, f in GGUFReader(tuned).fields.items()}
    plain_meta = {k: f.contents() for k, f in GGUFReader(untuned).fields.items()}
    assert meta[Key.TUNE_KEPT.gguf] is False
    assert meta[Key.CHECK_TUNED_KLD.gguf] > meta[Key.CHECK_UNTUNED_KLD.gguf]
    assert meta[Key.CHECK_KLD.gguf] == meta[Key.CHECK_UNTUNED_KLD.gguf] == plain_meta[Key.CHECK_KLD.gguf]
    got, want = _gguf_tensors(tuned), _gguf_tensors(untuned)
    assert got.keys() == want.keys()
    for name in want:
        assert np.array_equal(got[name], want[name]), name


def test_the_memory_rule_tunes_the_whole_model_where_it_fits():
    gib = 2**30
    fits = (tune.MEMORY_SHARE * 20 * gib - tune.WHOLE_MODEL_BYTES_FIXED) // tune.WHOLE_MODEL_BYTES_PER_WEIGHT
    assert tune.choose_mode("auto", "all", int(fits), 20 * gib)[0] == "model"
    mode, why = tune.choose_mode("auto", "all", int(fits) + 1000, 20 * gib)
    assert mode == "blocks" and "GiB are free" in why and "one block at a time" in why
    # 24 GB machines: a 0.5B tunes whole, a 1.5B block by block
    assert tune.choose_mode("auto", "all", 494_000_000, 22 * gib)[0] == "model"
    assert tune.choose_mode("auto", "all", 1_540_000_000, 22 * gib)[0] == "blocks"
    assert tune.choose_mode("blocks", "all", 1000, 20 * gib)[0] == "blocks"
    assert tune.choose_mode("model", "all", 10**12, 20 * gib)[0] == "model"
    assert tune.choose_mode("auto", "norms", 10**12, 20 * gib)[0] == "model"  # block-wise trains matrices


def _run_q4_0(layer, x, kwargs):
    """The decoder layer's output with its matrices at their Q4_0 values."""
    q = copy.deepcopy(layer)
    with torch.no_grad():
        for m in q.modules():
            if isinstance(m, nn.Linear):
                m.weight.copy_(q4_0_fake_quant(m.weight))
        out = q(x, **kwargs)
    return out[0] if isinstance(out, tuple) else out


@pytest.mark.parametrize("own_input, bf16", [(True, False), (False, False), (True, True)])
def test_block_wise_tuning_lowers_each_blocks_output_error(model_dir, tmp_path, own_input, bf16):
    """Each block, trained alone through Q4_0 from plain rounding, comes out with a lower output
    error against the FP model's hidden states on the training text (measured here, in FP32, on a
    model held whole, from the blocks as saved), with the tuned model's own input or the FP one, and
    with the training under bf16 autocast."""
    from awq2gguf.awq.forward import first_block_input
    from awq2gguf.streamed import StreamedModel

    x = ids(8, 32)
    streamed = StreamedModel(model_dir, tmp_path / "folded")
    results = tune_blocks.tune_blocks(streamed.model, x, ids(0, 32), steps=32, lr=0.05, folded=streamed,
                                      original=streamed.original(), own_input=own_input, bf16=bf16)
    assert len(results) == 2 and all(r.kept and r.held_out_tuned is None for r in results)
    fp = f16_rounded_model(model_dir)
    tuned = copy.deepcopy(fp)
    for saved, layer in zip(streamed.model.model.layers, tuned.model.layers):
        streamed.load(saved)
        layer.load_state_dict(saved.state_dict())
        streamed.release(saved)
    h_fp, kwargs = first_block_input(fp, x)
    h_q = q4_0_fake_quant(h_fp)
    for i, result in enumerate(results):
        assert result.last_loss < result.first_loss, result
        layer_kwargs = kwargs.of(fp.model.layers[i])
        target = fp.model.layers[i](h_fp, **layer_kwargs)
        target = target[0] if isinstance(target, tuple) else target
        h_in = h_q if own_input else h_fp
        before = F.mse_loss(_run_q4_0(fp.model.layers[i], h_in, layer_kwargs), target).item()
        after = F.mse_loss(_run_q4_0(tuned.model.layers[i], h_in, layer_kwargs), target).item()
        assert after < 0.7 * before, (i, before, after)
        h_fp, h_q = target, _run_q4_0(tuned.model.layers[i], h_q, layer_kwargs)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_block_wise_tuned_gguf_is_the_trained_model(model_dir, calib_text, tmp_path, monkeypatch, precision):
    """awq2gguf --tune-mode blocks: each block's matrices in OUT are gguf.quants' (ggml's) Q4_0 of
    the weights its training left, its norms and biases those weights exactly; the metadata says so."""
    trained = []

    def catching(layer, *args, **kwargs):
        losses = train(layer, *args, **kwargs)
        trained.append({n: p.detach().clone() for n, p in layer.state_dict().items()})
        return losses
    train = tune_blocks._train
    monkeypatch.setattr(tune_blocks, "_train", catching)
    out = tmp_path / "out.gguf"
    result = CliRunner().invoke(main, [str(model_dir), str(out), "--calib", str(calib_text), "--tune-steps", "6",
                                       "--tune-mode", "blocks", "--tune-lr", "0.5", "--calib-samples", "4",
                                       "--calib-tokens", "64", "--calib-held-out", "0",
                                       "--precision", precision])
    assert result.exit_code == 0, result.output
    assert "tuning block by block: --tune-mode blocks" in result.output
    assert "block-wise tuning: kept 2/2 tuned blocks" in result.output
    meta = {k: f.contents() for k, f in GGUFReader(out).fields.items()}
    assert meta[Key.TUNE_MODE.gguf] == "blocks" and meta[Key.TUNE_BLOCKS_KEPT.gguf] == 2
    assert meta[Key.TUNE_INPUT.gguf] == "quantized" and meta[Key.TUNE_STEPS.gguf] == 6
    assert meta[Key.PRECISION.gguf] == precision
    assert len(trained) == 2
    tensors = {t.name: t for t in GGUFReader(out).tensors}
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN2, 2)
    for i, weights in enumerate(trained):
        for local, w in weights.items():
            t = tensors[names.get_name(f"model.layers.{i}.{local}", try_suffixes=(".weight", ".bias"))]
            if w.dim() == 2:
                want = quantize(w.numpy(), gguf.GGMLQuantizationType.Q4_0)
                assert np.array_equal(np.asarray(t.data).reshape(want.shape), want), local
            else:
                assert np.array_equal(np.asarray(t.data).reshape(-1), w.numpy().reshape(-1)), local


def test_learned_scales_are_the_grid_the_gguf_holds(model_dir, calib_text, tmp_path, monkeypatch):
    """--tune-scales: each block's scales train (off 1, inside [SCALE_MIN, 1]) and OUT's matrices are
    exactly the learned grid: the Q4_0 round trips of the latents with their scales, not ggml's grid
    of the latents."""
    finished = []

    def catching(trainer):
        finished.append([(latent.clone(), scale.clone()) for latent, scale in zip(trainer.latents, trainer.scales)])
        finish(trainer)
    finish = tune.ThroughGrid.finish
    monkeypatch.setattr(tune.ThroughGrid, "finish", catching)
    out = tmp_path / "out.gguf"
    output, meta = _block_wise(model_dir, calib_text, out, 0, "--tune-scales")
    assert "through Q4_0, scales learned" in " ".join(output.split())
    assert meta[Key.TUNE_SCALES.gguf] is True and meta[Key.TUNE_BLOCKS_KEPT.gguf] == 2
    assert len(finished) == 2 and all(len(block) == 7 for block in finished)
    scales = torch.cat([scale for block in finished for _, scale in block])
    assert scales.min() >= tune.SCALE_MIN and scales.max() <= 1 and (scales < 1).float().mean() > 0.5
    tensors = {t.name: t for t in GGUFReader(out).tensors}
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN2, 2)
    layer = AutoModelForCausalLM.from_pretrained(model_dir).model.layers[0]
    matrices = [n for n, m in layer.named_modules() if isinstance(m, nn.Linear)]
    for i, block in enumerate(finished):
        for local, (latent, scale) in zip(matrices, block):
            t = tensors[names.get_name(f"model.layers.{i}.{local}.weight", try_suffixes=(".weight",))]
            written = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).reshape(latent.shape)
            assert np.array_equal(written, q4_0_fake_quant(latent, scale).numpy()), local
            assert not np.array_equal(written, q4_0_fake_quant(latent).numpy()), local


@pytest.mark.parametrize("bf16", [False, True])
def test_block_wise_training_runs_in_bf16_and_its_checks_in_fp32(model_dir, tmp_path, monkeypatch, bf16):
    """With bf16 the training steps' matrix products are bf16 (autocast); the held-out checks and the
    next block's input are always FP32."""
    from awq2gguf.streamed import StreamedModel

    streamed = StreamedModel(model_dir, tmp_path / "folded")
    seen = {"train": set(), "check": set()}
    phase = ["check"]

    def recording(layer, *args, **kwargs):
        phase[0] = "train"
        try:
            return train(layer, *args, **kwargs)
        finally:
            phase[0] = "check"
    train = tune_blocks._train
    monkeypatch.setattr(tune_blocks, "_train", recording)
    for layer in streamed.model.model.layers:
        layer.mlp.down_proj.register_forward_hook(lambda m, i, out: seen[phase[0]].add(out.dtype))
    tune_blocks.tune_blocks(streamed.model, ids(4, 32), ids(2, 32, seed=2), steps=2, lr=0.05, folded=streamed,
                            original=streamed.original(), bf16=bf16)
    assert seen == {"train": {torch.bfloat16 if bf16 else torch.float32}, "check": {torch.float32}}


@pytest.mark.parametrize("flags, want", [({"avx512f", "avx512_bf16"}, "bf16"), ({"amx_bf16"}, "bf16"),
                                         ({"asimd", "bf16"}, "bf16"), ({"avx2", "fma"}, "fp32")])
def test_auto_precision_is_bf16_where_the_cpu_multiplies_bf16(monkeypatch, flags, want):
    from awq2gguf import host

    monkeypatch.setattr(host, "cpu_info", lambda: host.CpuInfo("", "", frozenset(flags), 0.0))
    assert host.resolve_precision("auto") == want
    assert host.resolve_precision("fp32") == "fp32" and host.resolve_precision("bf16") == "bf16"


def test_block_wise_blocks_that_lose_the_held_out_check_are_not_kept(model_dir, calib_text, tmp_path, monkeypatch):
    """A training that wrecks every block: no block beats its untuned self on the held-out samples,
    none is kept, and OUT holds exactly what awq2gguf writes without tuning."""
    def wrecking(layer, *args, **kwargs):
        losses = train(layer, *args, **kwargs)
        with torch.no_grad():
            for p in layer.parameters():
                p.mul_(-3)
        return losses
    train = tune_blocks._train
    common = [str(model_dir), "--calib", str(calib_text), "--calib-samples", "4", "--calib-tokens", "64",
              "--calib-held-out", "2"]
    untuned, tuned = tmp_path / "untuned.gguf", tmp_path / "tuned.gguf"
    result = CliRunner().invoke(main, [common[0], str(untuned), *common[1:]])
    assert result.exit_code == 0, result.output
    monkeypatch.setattr(tune_blocks, "_train", wrecking)
    result = CliRunner().invoke(main, [common[0], str(tuned), *common[1:], "--tune-steps", "2", "--tune-mode", "blocks"])
    assert result.exit_code == 0, result.output
    assert "block-wise tuning: kept 0/2 tuned blocks" in result.output
    meta = {k: f.contents() for k, f in GGUFReader(tuned).fields.items()}
    assert meta[Key.TUNE_BLOCKS_KEPT.gguf] == 0
    got, want = _gguf_tensors(tuned), _gguf_tensors(untuned)
    assert got.keys() == want.keys()
    for name in want:
        assert np.array_equal(got[name], want[name]), name


def _block_wise(model_dir, calib_text, out, held_out: int, *extra: str):
    result = CliRunner().invoke(main, [str(model_dir), str(out), "--calib", str(calib_text), "--tune-steps", "2",
                                       "--tune-mode", "blocks", "--calib-samples", "4", "--calib-tokens", "64",
                                       "--calib-held-out", str(held_out), *extra])
    assert result.exit_code == 0, result.output
    return result.output, {k: f.contents() for k, f in GGUFReader(out).fields.items()}


def test_norms_end_to_end_after_block_wise_tuning_train_only_the_norms(model_dir, calib_text, tmp_path,
                                                                        monkeypatch):
    """--tune-norms-steps: OUT's matrices are the block-wise tuned model's, byte for byte; its norms
    and biases are exactly what the end-to-end training left (no held-out samples: kept)."""
    trained = {}

    def catching(model, *args, **kwargs):
        losses = tune_whole(model, *args, **kwargs)
        assert args[4] == "norms"
        trained.update((n, p.detach().clone()) for n, p in model.model.named_parameters() if p.dim() == 1)
        return losses
    tune_whole = tune.tune
    blocks, both = tmp_path / "blocks.gguf", tmp_path / "both.gguf"
    _block_wise(model_dir, calib_text, blocks, 0)
    monkeypatch.setattr(tune, "tune", catching)
    output, meta = _block_wise(model_dir, calib_text, both, 0, "--tune-norms-steps", "4")
    assert "norms end to end" in output
    assert meta[Key.TUNE_NORMS_STEPS.gguf] == 4 and meta[Key.TUNE_NORMS_KEPT.gguf] is True
    tensors, before = {t.name: t for t in GGUFReader(both).tensors}, _gguf_tensors(blocks)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.QWEN2, 2)
    norms = {names.get_name(n, try_suffixes=(".weight", ".bias")): w for n, w in trained.items()}
    assert len(norms) == 2 * 2 + 3 * 2 + 1  # per block two norms and three biases; the final norm
    moved = 0
    for name, t in tensors.items():
        if name in norms:
            assert np.array_equal(np.asarray(t.data).reshape(-1), norms[name].numpy().reshape(-1)), name
            moved += not np.array_equal(np.asarray(t.data), before[name])
        else:
            assert np.array_equal(np.asarray(t.data), before[name]), name
    assert moved == len(norms)


def test_norms_end_to_end_with_the_tied_output_matrix_train_the_embedding_table_too(tied_model_dir, calib_text,
                                                                                    tmp_path, monkeypatch):
    """--tune-norms-output: the tied matrix trains through Q4_0 beside the norms; OUT's token_embd is
    the Q4_0 of the latent the training left, the blocks' matrices the block-wise model's, byte for byte."""
    trained = {}

    def catching(model, *args, **kwargs):
        losses = tune_whole(model, *args, **kwargs)
        assert args[4] == "norms" and kwargs["tied_output"] is True
        trained["embed"] = model.get_input_embeddings().weight.detach().clone()
        return losses
    tune_whole = tune.tune
    blocks, both = tmp_path / "blocks.gguf", tmp_path / "both.gguf"
    _block_wise(tied_model_dir, calib_text, blocks, 0)
    monkeypatch.setattr(tune, "tune", catching)
    output, meta = _block_wise(tied_model_dir, calib_text, both, 0, "--tune-norms-steps", "4", "--tune-norms-output")
    assert "norms and the tied output matrix end to end" in output
    assert meta[Key.TUNE_NORMS_OUTPUT.gguf] is True
    embed = next(t for t in GGUFReader(both).tensors if t.name == "token_embd.weight")
    assert embed.tensor_type == gguf.GGMLQuantizationType.Q4_0
    written = gguf.quants.dequantize(np.asarray(embed.data), embed.tensor_type).reshape(trained["embed"].shape)
    assert np.array_equal(written, q4_0_fake_quant(trained["embed"]).numpy())
    before = _gguf_tensors(blocks)
    assert not np.array_equal(np.asarray(embed.data), before["token_embd.weight"])
    for t in GGUFReader(both).tensors:
        if t.name != "token_embd.weight" and len(t.shape) > 1:
            assert np.array_equal(np.asarray(t.data), before[t.name]), t.name


def test_norms_that_lose_the_held_out_check_leave_the_block_wise_model(model_dir, calib_text, tmp_path, monkeypatch):
    def wrecking(model, *args, **kwargs):
        losses = tune_whole(model, *args, **kwargs)
        with torch.no_grad():
            for p in model.model.parameters():
                if p.dim() == 1:
                    p.mul_(-3)
        return losses
    tune_whole = tune.tune
    blocks, both = tmp_path / "blocks.gguf", tmp_path / "both.gguf"
    _, blocks_meta = _block_wise(model_dir, calib_text, blocks, 2)
    monkeypatch.setattr(tune, "tune", wrecking)
    output, meta = _block_wise(model_dir, calib_text, both, 2, "--tune-norms-steps", "2")
    assert "lost: kept the block-wise model" in output
    assert meta[Key.TUNE_NORMS_KEPT.gguf] is False
    assert meta[Key.CHECK_KLD.gguf] == blocks_meta[Key.CHECK_KLD.gguf]
    got, want = _gguf_tensors(both), _gguf_tensors(blocks)
    assert got.keys() == want.keys()
    for name in want:
        assert np.array_equal(got[name], want[name]), name


@pytest.mark.parametrize("args, message", [
    (["--tune-norms-steps", "2"], "--tune-norms-steps follows block-wise tuning"),
    (["--tune-steps", "2", "--tune-mode", "model", "--tune-norms-steps", "2"], "--tune-norms-steps follows block-wise"),
])
def test_tuning_options_that_do_not_apply_are_refused(model_dir, calib_text, tmp_path, args, message):
    result = CliRunner().invoke(main, [str(model_dir), str(tmp_path / "out.gguf"), "--calib", str(calib_text), *args])
    assert result.exit_code != 0 and message in result.output
    assert list(tmp_path.iterdir()) == []


def test_norms_end_to_end_that_would_not_fit_is_refused():
    gib = 2**30
    tune.check_norms_fit(1_540_000_000, 22 * gib)  # a 1.5B on a 24 GB machine
    with pytest.raises(tune.TuneError, match=r"--tune-norms-steps holds the whole model: about 4\d\.\d GiB, 22\.0 GiB"):
        tune.check_norms_fit(7_600_000_000, 22 * gib)  # a 7B
    with pytest.raises(tune.TuneError):  # ... and 24 bytes per weight of a tied output matrix it trains
        tune.check_norms_fit(1_540_000_000, 22 * gib, 400_000_000)
