"""A short LoRA fine-tune of a development model on WikiText lines, for `bench lora`: an adapter
that changes perplexity on that text measurably, made on the CPU in a few minutes.

The lines come from the second half of the text, where `bench awq`'s calibration also comes
from and which the perplexity windows (at its start) never reach.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Callable

import torch

from ..checkpoint import load_tokenizer
from ..atomic import atomic_path
from .eval_text import learning_half

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def training_lines(text: str, n_lines: int) -> list[str]:
    """The first n_lines paragraphs of text's learning half (headings and the paragraph the middle
    cuts left out)."""
    lines = [l.strip() for l in learning_half(text).split("\n")[1:]]
    return [l for l in lines if l and not l.startswith("=")][:n_lines]


def make_adapter(model_dir: Path, lines: list[str], out: Path, steps: int, rank: int = 8, seq_len: int = 256,
                 batch: int = 4, lr: float = 3e-4, seed: int = 0,
                 on_step: Callable[[int, float], None] = lambda step, loss: None) -> Path:
    """A PEFT LoRA adapter (rank `rank` on every linear of the blocks) trained for `steps` steps of
    next-token loss on `lines`, packed into seq_len-token sequences; out appears when complete."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # the caller shows the steps
    torch.manual_seed(seed)
    tokenizer = load_tokenizer(model_dir)
    ids = torch.tensor(tokenizer("\n\n".join(lines))["input_ids"])
    sequences = ids[: len(ids) // seq_len * seq_len].view(-1, seq_len)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    with warnings.catch_warnings():
        # peft asks transformers whether gradient checkpointing is on by a name it has deprecated
        warnings.filterwarnings("ignore", "`is_gradient_checkpointing` is deprecated", FutureWarning)
        model = get_peft_model(model, LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0,
                                                 target_modules=TARGETS))
        model.train()
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
        order = torch.randperm(len(sequences))
        for step in range(steps):
            rows = order[(torch.arange(batch) + step * batch) % len(sequences)]
            loss = model(sequences[rows], labels=sequences[rows]).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            on_step(step + 1, loss.item())
    with atomic_path(out) as tmp:
        model.save_pretrained(tmp)
        (tmp / "training.json").write_text(json.dumps(
            {"lines": len(lines), "tokens": sequences.numel(), "steps": steps, "batch": batch, "seq_len": seq_len,
             "rank": rank, "lr": lr, "seed": seed, "final_loss": loss.item()}, indent=2))
    return out
