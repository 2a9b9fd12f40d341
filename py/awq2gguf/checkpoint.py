"""Hugging Face model folders: one-line errors for bad folders, the tokenizer, saving a whole model.

The weights are read one part at a time by streamed.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

from torch import nn

from .awq.layout import UnsupportedArchitecture, check_architecture
from .errors import Awq2ggufError

# Files save_pretrained writes itself; everything else (tokenizer, generation config) is copied.
_WRITTEN_BY_SAVE = ("*.safetensors", "*.bin", "*.safetensors.index.json", "*.bin.index.json", "config.json")


class CheckpointError(Awq2ggufError):
    pass


def first_line(e: Exception) -> str:
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
        raise CheckpointError(f"{config} is not valid JSON: {first_line(e)}") from e
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
        raise CheckpointError(f"the tokenizer in {model_dir} does not load: {first_line(e)}") from e


def copy_other_files(model_dir: Path, out_dir: Path) -> None:
    """Copy model_dir's files other than weights and config.json (tokenizer, chat template...)."""
    for f in Path(model_dir).iterdir():
        if f.is_file() and not any(f.match(p) for p in _WRITTEN_BY_SAVE):
            shutil.copy2(f, Path(out_dir) / f.name)


def save_model(model: nn.Module, model_dir: Path, out_dir: Path) -> Path:
    """Save model (weights, config) to out_dir with model_dir's other files (tokenizer etc.)."""
    out_dir = Path(out_dir)
    model.save_pretrained(out_dir, max_shard_size="256MB")  # safetensors buffers a whole shard
    copy_other_files(model_dir, out_dir)
    return out_dir
