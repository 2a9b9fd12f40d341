"""Dropping decoder blocks (--drop-blocks): SLEB's and ShortGPT's choices against brute force, the
pruned folder against the model with those blocks skipped, the pruned GGUF in both builds, and errors."""

import copy
import math

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from gguf import GGUFReader
from torch import nn
from transformers import AutoModelForCausalLM

from awq2gguf import prune
from awq2gguf.checkpoint import copy_other_files
from awq2gguf.cli import main
from awq2gguf.metadata import Key
from awq2gguf.modes import DropMethod
from awq2gguf.streamed import StreamedModel
from conftest import f16_rounded_model, llama_cpp_logits

N_LAYERS = 6
TOKENS = [9707, 1879, 13, 576, 3974, 13876, 38835, 34208, 916, 279, 15678, 5562]


@pytest.fixture(scope="module")
def distinct_blocks(tiny_hf, tmp_path_factory):
    """A tiny Qwen2 whose blocks matter by different amounts (random ones barely change their
    input), and whose logits are peaked, so that choices and KL divergences can go wrong."""
    model = AutoModelForCausalLM.from_pretrained(tiny_hf("Qwen2ForCausalLM", "tiny-deep"), dtype=torch.float32)
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(10)
        for i, layer in enumerate(model.model.layers):
            for linear in (layer.self_attn.o_proj, layer.mlp.down_proj):
                linear.weight.mul_(1 + 3 * ((i * 5) % N_LAYERS))
    out = tmp_path_factory.mktemp("distinct") / "model"
    model.save_pretrained(out)
    copy_other_files(tiny_hf("Qwen2ForCausalLM", "tiny-deep"), out)  # the tokenizer
    return out


def calibration_ids(n_samples=3, n_tokens=24):
    return torch.randint(0, 5000, (n_samples, n_tokens), generator=torch.Generator().manual_seed(1))


def without(model, blocks):
    """A copy of model whose layer list skips these blocks."""
    pruned = copy.deepcopy(model)
    pruned.model.layers = nn.ModuleList(l for i, l in enumerate(pruned.model.layers) if i not in blocks)
    for k, layer in enumerate(pruned.model.layers):
        layer.self_attn.layer_idx = k
    pruned.config.num_hidden_layers = len(pruned.model.layers)
    pruned.config.layer_types = [t for i, t in enumerate(model.config.layer_types) if i not in blocks]
    return pruned


def perplexity(model, ids):
    with torch.no_grad():
        return math.exp(model(ids, labels=ids).loss.item())


def test_sleb_is_the_greedy_choice_by_whole_model_perplexity(distinct_blocks):
    model, ids = f16_rounded_model(distinct_blocks), calibration_ids()
    got = prune.choose(model, ids, 3, "sleb")
    removed, after = [], []
    for _ in range(3):
        ppl = {j: perplexity(without(model, removed + [j]), ids) for j in range(N_LAYERS) if j not in removed}
        assert max(ppl.values()) > 1.1 * min(ppl.values())  # the choice matters
        best = min(ppl, key=ppl.get)
        removed.append(best)
        after.append(ppl[best])
    assert got.blocks == tuple(removed)
    assert got.ppl == pytest.approx(after, rel=1e-4)
    assert got.ppl_before == pytest.approx(perplexity(model, ids), rel=1e-4)


def test_shortgpt_drops_the_blocks_that_turn_their_input_least(distinct_blocks):
    model, ids = f16_rounded_model(distinct_blocks), calibration_ids()
    influence = []
    hooks = [layer.register_forward_hook(lambda _m, args, out: influence.append(
        1 - nn.functional.cosine_similarity(args[0], out[0] if isinstance(out, tuple) else out, dim=-1).mean().item()))
        for layer in model.model.layers]
    with torch.no_grad():
        model(ids)
    for h in hooks:
        h.remove()
    got = prune.choose(model, ids, 2, "shortgpt")
    assert list(got.blocks) == sorted(range(N_LAYERS), key=influence.__getitem__)[:2]
    assert got.ppl == pytest.approx([perplexity(without(model, list(got.blocks[:k])), ids) for k in (1, 2)],
                                    rel=1e-4)


def test_streamed_pruned_folder_is_the_model_with_those_blocks_skipped(distinct_blocks, tmp_path):
    streamed = StreamedModel(distinct_blocks, tmp_path / "folded")
    streamed.drop_blocks([4, 1])
    pruned = AutoModelForCausalLM.from_pretrained(streamed.write_folder(), dtype=torch.float32).eval()
    assert pruned.config.num_hidden_layers == N_LAYERS - 2
    ids = calibration_ids(1)
    with torch.no_grad():
        want = without(f16_rounded_model(distinct_blocks), [1, 4])(ids).logits
        torch.testing.assert_close(pruned(ids).logits, want, rtol=1e-5, atol=1e-5)
        assert (want - f16_rounded_model(distinct_blocks)(ids).logits).abs().max() > 1  # the blocks mattered


@pytest.mark.parametrize("method", DropMethod.values())
def test_pruned_gguf_runs_in_both_builds_as_the_pruned_model(distinct_blocks, calib_text, builds, tmp_path, method):
    """F16 and no AWQ (alpha 0, no clipping or compensation), so that only the pruning is compared."""
    out = tmp_path / "out.gguf"
    result = CliRunner().invoke(main, [str(distinct_blocks), str(out), "--calib", str(calib_text), "--drop-blocks",
                                       "2", "--drop-blocks-method", method, "--qtype", "F16", "--alpha-steps", "0",
                                       "--no-clip", "--no-compensate", "--calib-samples", "4", "--calib-tokens", "64"])
    assert result.exit_code == 0, result.output
    meta = {k: f.contents() for k, f in GGUFReader(out).fields.items()}
    assert meta["qwen2.block_count"] == N_LAYERS - 2
    blocks = [int(b) for b in meta[Key.DROP_BLOCKS_BLOCKS.gguf].split(",")]
    assert meta[Key.DROP_BLOCKS_METHOD.gguf] == method and len(blocks) == 2
    assert len(meta[Key.DROP_BLOCKS_CALIB_PPL.gguf].split(",")) == 3
    assert f"dropped blocks {blocks[0]}, {blocks[1]} ({method})" in " ".join(result.output.split())
    with torch.no_grad():
        want = torch.log_softmax(without(f16_rounded_model(distinct_blocks), blocks)(torch.tensor([TOKENS])).logits[0], -1)
        unpruned = torch.log_softmax(f16_rounded_model(distinct_blocks)(torch.tensor([TOKENS])).logits[0], -1)

    def kl(p, q):
        return (p.exp() * (p - q)).sum(-1).mean().item()
    assert kl(unpruned, want) > 1e-2  # dropping the blocks changed the model
    for build in builds.values():
        got = torch.log_softmax(torch.from_numpy(np.asarray(llama_cpp_logits(build, out, TOKENS))).float(), -1)
        assert kl(want, got) < 1e-3, build.name


@pytest.mark.parametrize("args,message", [
    (["--drop-blocks", "6"], "cannot drop 6 of the model's 6 blocks: at most 5"),
    (["--drop-block-list", "1,7"], "block 7 does not exist: the model has blocks 0 to 5"),
    (["--drop-block-list", "2,2"], "block 2 is named twice"),
    (["--drop-block-list", "2;3"], "'2;3' is not a comma-separated list of block numbers"),
    (["--drop-blocks", "2", "--drop-block-list", "1"], "--drop-blocks and --drop-block-list: give one of them"),
    (["--drop-blocks", "2", "--engine", "autoawq"], "dropping blocks works with --engine awq2gguf only"),
])
def test_bad_block_choices_get_one_line_before_any_work(distinct_blocks, calib_text, tmp_path, args, message):
    out = tmp_path / "out.gguf"
    result = CliRunner().invoke(main, [str(distinct_blocks), str(out), "--calib", str(calib_text), *args])
    assert result.exit_code != 0 and message in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_checks_of_a_pruned_tuned_model_measure_it_against_the_unpruned_one(distinct_blocks, calib_text, tmp_path):
    """Tuning distils the whole model into the pruned one, so its held-out checks compare with the
    whole model, where pruning alone compares with the pruned FP model (the pruned reference made a
    tuned model that moved toward the whole one lose the check: OUT was the untuned model). Plain
    Q4_0 of the same pruned model is farther from the whole model than from the pruned one."""
    common = ["--calib", str(calib_text), "--calib-samples", "4", "--calib-tokens", "64", "--calib-held-out", "2",
              "--drop-block-list", "1,4"]
    plain_kld = {}
    for name, tuning in (("pruned", []), ("tuned", ["--tune-steps", "2"])):
        out = tmp_path / f"{name}.gguf"
        result = CliRunner().invoke(main, [str(distinct_blocks), str(out), *common, *tuning])
        assert result.exit_code == 0, result.output
        plain_kld[name] = GGUFReader(out).fields[Key.CHECK_PLAIN_KLD.gguf].contents()
    assert plain_kld["tuned"] > plain_kld["pruned"] > 0
