"""The model held one part at a time gives the same folded weights and log-probabilities as the
model held whole in memory."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from awq2gguf.awq.apply import apply_awq
from awq2gguf.awq.forward import model_log_probs
from awq2gguf.checkpoint import CheckpointError
from awq2gguf.q4_0 import q4_0_fake_quant
from awq2gguf.streamed import StreamedModel, round_to_f16
from test_awq_apply import with_salient_channels
from test_awq_fold import tiny


@pytest.fixture
def checkpoint(tmp_path):
    """A tiny bf16 checkpoint (vocabulary 512: the search's cost is in the output matrix) with
    the outlier channels AWQ acts on, and one more file to copy."""
    def make(arch: str, tied: bool):
        model = with_salient_channels(tiny(arch, 2))
        if tied:
            model.config.tie_word_embeddings = True
            model.tie_weights()
        folder = tmp_path / f"{arch}-{tied}"
        model.to(torch.bfloat16).save_pretrained(folder)
        (folder / "tokenizer.json").write_text("{}")
        return folder
    return make


def resident(model_dir, untie_output=False):
    """The whole model in FP32, rounded to F16 as StreamedModel loads it."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    for p in model.parameters():
        p.data = round_to_f16(p.data)
    if untie_output:
        model.lm_head.weight = torch.nn.Parameter(model.model.embed_tokens.weight.detach().clone())
    return model


def folded_tensors(folder):
    weights = {}
    for shard in folder.glob("*.safetensors"):
        weights.update(load_file(shard))
    return weights


@pytest.mark.parametrize("arch,tied,untie", [("Qwen2ForCausalLM", True, False), ("Qwen2ForCausalLM", True, True),
                                                ("LlamaForCausalLM", False, False)])
def test_streamed_fold_equals_the_fold_in_memory(checkpoint, tmp_path, arch, tied, untie):
    model_dir = checkpoint(arch, tied)
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 512, (8, 64), generator=g)
    held_out = torch.randint(0, 512, (2, 32), generator=g)

    whole = resident(model_dir, untie)
    expected = apply_awq(whole, ids)
    streamed = StreamedModel(model_dir, tmp_path / "folded", untie)
    assert all(p.is_meta for p in streamed.model.parameters())  # nothing is held before its turn
    got = apply_awq(streamed.model, ids, weights=streamed)
    assert got == expected
    assert got.clipped[-1]  # the output matrix (when tied: the embeddings) changed, and was saved
    assert all(p.is_meta for p in streamed.model.parameters())  # ... nor after

    # The whole model's log-probabilities, FP and all-Q4_0, from the folded parts on disk.
    for a, b in zip(model_log_probs(streamed.model, held_out, (False, True), streamed),
                    model_log_probs(whole, held_out, (False, True))):
        assert torch.equal(a, b)

    folder = streamed.write_folder()
    weights = folded_tensors(folder)
    state = {n: p for n, p in whole.state_dict().items() if not (n == "lm_head.weight" and tied and not untie)}
    assert weights.keys() == state.keys()
    for name, w in state.items():
        assert torch.equal(weights[name], w), name
    config = json.loads((folder / "config.json").read_text())
    assert config["tie_word_embeddings"] is (tied and not untie)
    assert (folder / "tokenizer.json").is_file()


def test_saved_as_q4_0_the_parts_load_back_as_their_q4_0(checkpoint, tmp_path):
    model_dir = checkpoint("LlamaForCausalLM", False)
    ids = torch.randint(0, 512, (8, 64), generator=torch.Generator().manual_seed(0))
    whole = resident(model_dir)
    expected = apply_awq(whole, ids)
    streamed = StreamedModel(model_dir, tmp_path / "folded", as_q4_0=True)
    assert apply_awq(streamed.model, ids, weights=streamed) == expected
    layer = streamed.model.model.layers[1]
    streamed.load(layer)
    for (name, p), w in zip(layer.named_parameters(), whole.model.layers[1].parameters()):
        assert torch.equal(p, q4_0_fake_quant(w) if w.dim() == 2 else w), name
    streamed.release(layer)
    held_out = torch.randint(0, 512, (2, 32))
    (got,) = model_log_probs(streamed.model, held_out, (True,), streamed)
    (want,) = model_log_probs(whole, held_out, (True,))
    assert torch.equal(got, want)


def test_reset_writes_the_checkpoint_weights(checkpoint, tmp_path):
    model_dir = checkpoint("Qwen2ForCausalLM", True)
    streamed = StreamedModel(model_dir, tmp_path / "folded")
    apply_awq(streamed.model, torch.randint(0, 512, (8, 64)), weights=streamed)
    streamed.reset()
    weights = folded_tensors(streamed.write_folder())
    for name, w in resident(model_dir).state_dict().items():
        if name != "lm_head.weight":
            assert torch.equal(weights[name], w), name


@pytest.mark.parametrize("keep", [True, False])
def test_a_branch_is_kept_or_restored(checkpoint, tmp_path, keep):
    """After branch(), saves go to a second folder: restore() goes back to the AWQ fold, keeping
    the branch writes one folder with the parts saved on it and the others as AWQ saved them."""
    model_dir = checkpoint("Qwen2ForCausalLM", False)
    streamed = StreamedModel(model_dir, tmp_path / "folded")
    apply_awq(streamed.model, torch.randint(0, 512, (8, 64), generator=torch.Generator().manual_seed(0)),
              weights=streamed)
    folded = {n: w.clone() for n, w in folded_tensors(tmp_path / "folded").items()}
    before = streamed.branch(tmp_path / "tuned")
    layer = streamed.model.model.layers[1]
    streamed.load(layer)
    with torch.no_grad():
        for p in layer.parameters():
            p.add_(1.0)
    streamed.save(layer)
    if not keep:
        streamed.restore(before)
    weights = folded_tensors(streamed.write_folder())
    assert folded.keys() < weights.keys()  # and the unchanged embeddings, from the checkpoint
    for name, w in folded.items():
        moved = keep and name.startswith("model.layers.1.")
        assert torch.equal(weights[name], w + 1.0 if moved else w), name
    assert streamed.folded_dir == tmp_path / ("tuned" if keep else "folded")
    if not keep:
        assert list((tmp_path / "tuned").glob("*.safetensors")) == []  # the branch's files are gone


def test_a_sharded_bf16_checkpoint_reads_like_one_file(checkpoint, tmp_path):
    model_dir = checkpoint("Qwen2ForCausalLM", True)
    sharded = tmp_path / "sharded"
    AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).save_pretrained(sharded, max_shard_size="100KB")
    assert len(list(sharded.glob("*.safetensors"))) > 2 and (sharded / "model.safetensors.index.json").is_file()
    a = StreamedModel(model_dir, tmp_path / "a")
    b = StreamedModel(sharded, tmp_path / "b")
    layer_a, layer_b = a.model.model.layers[1], b.model.model.layers[1]
    a.load(layer_a)
    b.load(layer_b)
    for (name, p), q in zip(layer_a.named_parameters(), layer_b.parameters()):
        assert p.dtype == torch.float32 and torch.equal(p, q), name


def test_a_missing_shard_is_named(checkpoint, tmp_path):
    sharded = tmp_path / "sharded"
    AutoModelForCausalLM.from_pretrained(checkpoint("Qwen2ForCausalLM", True)).save_pretrained(
        sharded, max_shard_size="100KB")
    victim = sorted(sharded.glob("*.safetensors"))[1]
    victim.unlink()
    with pytest.raises(CheckpointError, match=f"{victim.name}, named in .* weight index, is missing"):
        StreamedModel(sharded, tmp_path / "folded")
    shutil.rmtree(sharded)


def test_f16_rounding_breaks_the_ties_of_weights_on_a_coarser_grid():
    """Weights dequantized from 5 bits sit on Q4_0's exact halves, which ggml always rounds up: a
    bias in every block, in FP32. After F16 rounding they go both ways, as in llama.cpp's F16 path."""
    from awq2gguf.q4_0 import q4_0_fake_quant

    g = torch.Generator().manual_seed(0)
    d = torch.rand(4096, 1, generator=g) * 0.01 + 0.001
    q = torch.randint(-15, 16, (4096, 32), generator=g).float()
    q[:, 0] = -16  # the block's largest magnitude: Q4_0's step is then exactly twice the grid's
    w = q * d
    bias_f32 = (q4_0_fake_quant(w) - w).mean().abs() / d.mean()
    w = round_to_f16(w)
    assert torch.equal(w, w.half().float())
    bias_f16 = (q4_0_fake_quant(w) - w).mean().abs() / d.mean()
    assert bias_f16 < 0.3 * bias_f32, (bias_f16, bias_f32)  # measured: 0.40 -> 0.08 of a grid step
