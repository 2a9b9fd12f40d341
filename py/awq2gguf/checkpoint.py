"""Hugging Face model folders in and out: load with one-line errors for bad folders, save folded weights."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import torch
from torch import nn

from .awq.layout import UnsupportedArchitecture, check_architecture

WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin")
# Files save_pretrained writes itself; everything else (tokenizer, generation config) is copied.
_WRITTEN_BY_SAVE = ("*.safetensors", "*.bin", "*.safetensors.index.json", "*.bin.index.json", "config.json")


class CheckpointError(ValueError):
    pass


def _first_line(e: Exception) -> str:
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0]


def architecture(model_dir: Path) -> str:
    """The architecture config.json names, checked against the supported ones."""
    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise CheckpointError(f"{model_dir} is not a directory")
    config = model_dir / "config.json"
    if not config.is_file():
        raise CheckpointError(f"{model_dir} has no config.json: not a Hugging Face model folder")
    try:
        archs = json.loads(config.read_text()).get("architectures") or []
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError) as e:
        raise CheckpointError(f"{config} is not valid JSON: {_first_line(e)}") from e
    if not archs:
        raise CheckpointError(f"{config} names no architecture (\"architectures\" is missing)")
    try:
        return check_architecture(SimpleNamespace(architectures=archs))
    except UnsupportedArchitecture as e:
        raise CheckpointError(str(e)) from None


def load_tokenizer(model_dir: Path):
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(model_dir)
    except Exception as e:  # transformers raises many kinds here; all mean the same to the user
        raise CheckpointError(f"the tokenizer in {model_dir} does not load: {_first_line(e)}") from e


def load_model(model_dir: Path) -> nn.Module:
    """The model in FP32 (the searches and folding need it; the converter keeps it exact)."""
    from transformers import AutoModelForCausalLM

    model_dir = Path(model_dir)
    architecture(model_dir)
    if not any(any(model_dir.glob(p)) for p in WEIGHT_PATTERNS):
        raise CheckpointError(f"{model_dir} has no weights ({' or '.join(WEIGHT_PATTERNS)})")
    try:
        # In the checkpoint's own dtype first, then FP32 one tensor at a time: loading straight
        # into FP32 holds both copies of the whole model at once.
        model, info = AutoModelForCausalLM.from_pretrained(model_dir, dtype="auto", output_loading_info=True)
    except Exception as e:
        raise CheckpointError(f"the weights in {model_dir} do not load: {_first_line(e)}") from e
    if info.get("missing_keys"):
        missing = sorted(info["missing_keys"])
        raise CheckpointError(f"the weights in {model_dir} lack {len(missing)} tensors, e.g. {missing[0]}")
    return model.float().eval()


def untie_output(model: nn.Module) -> None:
    """Give the output matrix its own copy of the token embeddings, so AWQ can scale it."""
    head = model.get_output_embeddings()
    head.weight = nn.Parameter(model.get_input_embeddings().weight.detach().clone())
    model.config.tie_word_embeddings = False
    model.config.get_text_config().tie_word_embeddings = False


def save_model(model: nn.Module, model_dir: Path, out_dir: Path) -> Path:
    """Save model (weights, config) to out_dir with model_dir's other files (tokenizer etc.)."""
    out_dir = Path(out_dir)
    model.save_pretrained(out_dir, max_shard_size="256MB")  # safetensors buffers a whole shard
    for f in Path(model_dir).iterdir():
        if f.is_file() and not any(f.match(p) for p in _WRITTEN_BY_SAVE):
            shutil.copy2(f, out_dir / f.name)
    return out_dir
