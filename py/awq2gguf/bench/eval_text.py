"""The evaluation text's two halves: perplexity windows come from its start, everything a method
learns from (calibration windows, fine-tuning lines) from its second half, which they never reach."""

from __future__ import annotations

from pathlib import Path

from ..calibration import from_text, start_ids
from ..checkpoint import load_tokenizer


def learning_half(text: str) -> str:
    return text[len(text) // 2:]


def calibration_windows(model_dir: Path, eval_text: Path, n_windows: int, n_tokens: int) -> list[str]:
    """n_windows windows of n_tokens of model_dir's tokens from the learning half, decoded (without
    the BOS a window starts with: reading the file adds it again)."""
    tokenizer = load_tokenizer(model_dir)
    calib = from_text(tokenizer, learning_half(eval_text.read_text()), n_windows, n_tokens, str(eval_text))
    skip = len(start_ids(tokenizer))
    return [tokenizer.decode(row[skip:]) for row in calib.input_ids]
