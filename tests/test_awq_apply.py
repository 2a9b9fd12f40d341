"""AWQ over a whole tiny model: the FP function is kept, the Q4_0 model gets closer to FP."""

import pytest
import torch

from awq2gguf.awq.apply import apply_awq, output_is_tied
from awq2gguf.awq.forward import model_log_probs
from awq2gguf.awq.layout import ARCHITECTURES, layout_of
from awq2gguf.q4_0 import q4_0_fake_quant
from test_awq_fold import tiny


def with_salient_channels(model):
    """Outlier channels in the norms before attention and MLP, as trained LLMs have: what AWQ exists for."""
    layout = layout_of(model)
    with torch.no_grad():
        for layer in model.model.layers:
            for norm in (layer.get_submodule(layout.attn_norm), layer.get_submodule(layout.mlp_norm)):
                norm.weight[[5, 40, 99]] = (norm.weight[[5, 40, 99]] + layout.norm_offset) * 25 - layout.norm_offset
    return model


def fake_quantized_logits(model, tokens):
    saved = {n: p.detach().clone() for n, p in model.named_parameters()}
    with torch.no_grad():
        for layer in model.model.layers:
            for m in layer.modules():
                if isinstance(m, torch.nn.Linear):
                    m.weight.data = q4_0_fake_quant(m.weight.data)
        logits = model(tokens).logits
        for n, p in model.named_parameters():
            p.data = saved[n]
    return logits


@pytest.mark.parametrize("arch", ["Qwen2ForCausalLM", "Gemma3ForCausalLM", "Phi3ForCausalLM"])
def test_apply_awq_keeps_fp_logits_and_brings_q4_0_closer(arch):
    model = with_salient_channels(tiny(arch, 4))
    g = torch.Generator().manual_seed(2)
    calib, held_out = torch.randint(0, 512, (8, 64), generator=g), torch.randint(0, 512, (2, 32), generator=g)
    with torch.no_grad():
        fp = model(held_out).logits
    plain_error = (fake_quantized_logits(model, held_out) - fp).pow(2).mean().item()

    # Clipping and compensated rounding change the FP function: on their own below.
    results = apply_awq(model, calib, clip=False, compensated=False).groups

    with torch.no_grad():
        assert torch.allclose(model(held_out).logits, fp, rtol=1e-3, atol=1e-3)
    output = [(2, "output")] * (not output_is_tied(model))  # an untied output is scaled too
    assert [(r.layer, r.group) for r in results] == [(i, g) for i in range(2) for g in (
        "attn_in", "attn_v_o", "mlp_in", "mlp_down")] + output
    assert all(r.error <= r.plain_error for r in results)
    awq_error = (fake_quantized_logits(model, held_out) - fp).pow(2).mean().item()
    assert awq_error < 0.8 * plain_error, (awq_error, plain_error)


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_block_by_block_the_model_gives_its_own_log_probs(arch):
    """Each decoder layer is run with its own arguments: Gemma 3's sliding-window layer gets its
    window's mask and RoPE base, its global layer the others."""
    items = {"layer_types": ["sliding_attention", "full_attention"]} if arch == "Gemma3ForCausalLM" else {}
    model = tiny(arch, 2, **items)
    tokens = torch.randint(0, 512, (2, 24), generator=torch.Generator().manual_seed(1))  # longer than the window
    with torch.no_grad():
        expected = model(tokens).logits.log_softmax(-1).flatten(0, 1)
    got, = model_log_probs(model, tokens, (False,))
    assert torch.allclose(got.float(), expected, atol=4e-3), (got - expected).abs().max()  # kept in F16


def test_clipping_brings_q4_0_closer_still():
    g = torch.Generator().manual_seed(2)
    calib, held_out = torch.randint(0, 512, (8, 64), generator=g), torch.randint(0, 512, (2, 32), generator=g)
    errors = {}
    for clip in (False, True):
        model = with_salient_channels(tiny("LlamaForCausalLM", 2))
        with torch.no_grad():
            fp = model(held_out).logits
        apply_awq(model, calib, clip=clip, compensated=False)
        errors[clip] = (fake_quantized_logits(model, held_out) - fp).pow(2).mean().item()
    assert errors[True] < errors[False], errors


def test_tied_output_is_left_alone():
    model = tiny("LlamaForCausalLM", 2)
    model.config.tie_word_embeddings = True
    model.tie_weights()
    embeddings = model.get_input_embeddings().weight.detach().clone()
    calib = torch.randint(0, 512, (2, 32), generator=torch.Generator().manual_seed(0))
    results = apply_awq(model, calib, clip=False).groups
    assert "output" not in {r.group for r in results}  # a scale would change the embeddings' rows
    assert torch.equal(model.get_input_embeddings().weight, embeddings)  # ... and so would compensation
    result = apply_awq(model, calib)  # clipping changes the shared Q4_0 blocks, which serve both uses
    clipped = model.get_input_embeddings().weight
    assert model.get_output_embeddings().weight is clipped
    assert (clipped.abs() <= embeddings.abs()).all()
    assert torch.equal(clipped, embeddings) != result.clipped[-1]  # clipped exactly when the check kept it
    assert result.compensated[-1] is False


def test_no_block_ends_worse_than_plain_rounding_on_its_objective():
    """Weights on a coarse grid (as in a checkpoint dequantized from 5 bits) are where scaling
    loses to plain Q4_0; the guard must fall back there and never pick a worse block."""
    model = with_salient_channels(tiny("Qwen2ForCausalLM", 4))
    with torch.no_grad():
        for layer in model.model.layers:  # snap every weight to a Q5_0-like grid per 32-block
            for m in layer.modules():
                if isinstance(m, torch.nn.Linear):
                    b = m.weight.view(-1, 32)
                    d = b.abs().amax(-1, keepdim=True) / 16
                    m.weight.copy_(((b / d).round().clamp(-16, 15) * d).view_as(m.weight))
    calib = torch.randint(0, 512, (8, 64), generator=torch.Generator().manual_seed(3))
    result = apply_awq(model, calib)
    assert len(result.block_errors) == len(model.model.layers)
    for chosen, plain in result.block_errors:
        assert 0 < chosen <= plain


def test_kept_groups_lower_the_block_error_they_were_judged_on():
    model = with_salient_channels(tiny("LlamaForCausalLM", 2))
    calib = torch.randint(0, 512, (8, 64), generator=torch.Generator().manual_seed(2))
    result = apply_awq(model, calib)
    assert any(g.kept for g in result.groups)  # salient channels: scaling pays somewhere
    assert sum(c for c, _ in result.block_errors) < sum(p for _, p in result.block_errors)


def test_compensated_rounding_is_kept_where_it_pays_and_survives_q4_0():
    g = torch.Generator().manual_seed(2)
    calib = torch.randint(0, 512, (8, 64), generator=g)
    errors = {}
    for compensated in (False, True):
        model = with_salient_channels(tiny("Qwen2ForCausalLM", 4))
        result = apply_awq(model, calib, compensated=compensated)
        errors[compensated] = sum(c for c, _ in result.block_errors)
    assert any(result.compensated)
    assert errors[True] < errors[False], errors
    # A compensated block is never clipped first: compensation would take the clipped weights as
    # its target, and their shrunk outputs add up over blocks (issue 14).
    assert not any(c and k for c, k in zip(result.clipped[:-1], result.compensated[:-1]))
    for layer, kept in zip(model.model.layers, result.compensated):
        linears = [m for m in layer.modules() if isinstance(m, torch.nn.Linear)]
        # A compensated block is already on the Q4_0 grid: llama-quantize will write it as it is.
        assert all(torch.equal(q4_0_fake_quant(l.weight), l.weight) for l in linears) == kept


def test_bf16_products_choose_as_well_as_fp32():
    """With bf16 products (search, rounding, block checks) the blocks' linears multiply in bf16 and
    the chosen weights bring Q4_0 as close to FP as FP32 products do, within a few percent."""
    g = torch.Generator().manual_seed(2)
    calib, held_out = torch.randint(0, 512, (8, 64), generator=g), torch.randint(0, 512, (2, 32), generator=g)
    errors, seen = {}, set()
    for products in (torch.float32, torch.bfloat16):
        model = with_salient_channels(tiny("Qwen2ForCausalLM", 4))
        with torch.no_grad():
            fp = model(held_out).logits
        hooks = [layer.mlp.down_proj.register_forward_hook(lambda m, i, out: seen.add((products, out.dtype)))
                 for layer in model.model.layers]
        result = apply_awq(model, calib, products=products)
        for h in hooks:
            h.remove()
        assert any(result.compensated)
        errors[products] = (fake_quantized_logits(model, held_out) - fp).pow(2).mean().item()
    assert seen == {(torch.float32, torch.float32), (torch.bfloat16, torch.bfloat16)}
    assert errors[torch.bfloat16] < 1.05 * errors[torch.float32], errors
