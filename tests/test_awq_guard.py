"""The output objective: a Q4_0 head quantized a slice of rows at a time is the quantized head."""

import torch
from torch import nn
from torch.nn import functional as F

from awq2gguf.awq.guard import TOKENS_PER_STEP, kl_divergence, log_prob_steps, log_probs
from awq2gguf.awq.search import ROWS_PER_STEP
from awq2gguf.q4_0 import q4_0_fake_quant


def test_log_probs_of_a_q4_0_head_in_slices_equal_the_whole_quantized_head():
    g = torch.Generator().manual_seed(0)
    vocab, hidden = 2 * ROWS_PER_STEP + 123, 64  # three slices of rows, the last one short
    head = nn.Linear(hidden, vocab, bias=False).requires_grad_(False)
    head.weight.copy_(torch.randn(vocab, hidden, generator=g) * 0.05)
    norm = nn.LayerNorm(hidden)
    h = torch.randn(2, TOKENS_PER_STEP // 2 + 7, hidden, generator=g)  # steps of tokens, the last short

    with torch.no_grad():
        whole = F.log_softmax(F.linear(norm(h.reshape(-1, hidden)), q4_0_fake_quant(head.weight)), -1)
    got = log_probs(h, norm, head, quantize_head=True)
    assert got.dtype == torch.float16 and got.shape == whole.shape
    assert torch.allclose(got.float(), whole, atol=2e-2, rtol=1e-3)

    ref = log_probs(h, norm, head, quantize_head=False)
    assert kl_divergence(ref, log_prob_steps(h, norm, head, quantize_head=True)) == kl_divergence(ref, got)
    assert kl_divergence(ref, got) > 0 and kl_divergence(ref, ref) == 0
