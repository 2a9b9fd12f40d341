"""Hugging Face model folders in and out: load with one-line errors for bad folders, save folded weights."""

from __future__ import annotations

import ctypes
import json
import mmap
import shutil
from pathlib import Path
from types import SimpleNamespace

import torch
from torch import nn

from .awq.layout import UnsupportedArchitecture, check_architecture

WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin")
MADV_DONTNEED = 4  # Linux
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
        # In the checkpoint's own dtype first, then FP32 one tensor at a time (_cast_to_fp32):
        # loading straight into FP32 holds both copies of the whole model at once.
        model, info = AutoModelForCausalLM.from_pretrained(model_dir, dtype="auto", output_loading_info=True)
    except Exception as e:
        raise CheckpointError(f"the weights in {model_dir} do not load: {_first_line(e)}") from e
    if info.get("missing_keys"):
        missing = sorted(info["missing_keys"])
        raise CheckpointError(f"the weights in {model_dir} lack {len(missing)} tensors, e.g. {missing[0]}")
    _cast_to_fp32(model)
    return model.eval()


def _mapped_checkpoint_ranges() -> list[tuple[int, int]]:
    """Address ranges where this process has a .safetensors file mapped (none off Linux)."""
    try:
        lines = Path("/proc/self/maps").read_text().splitlines()
    except OSError:
        return []
    ranges = []
    for line in lines:
        fields = line.split()
        if len(fields) >= 6 and fields[5].endswith(".safetensors"):
            start, end = (int(a, 16) for a in fields[0].split("-"))
            ranges.append((start, end))
    return ranges


def _cast_to_fp32(model: nn.Module) -> None:
    """FP32 one parameter at a time, handing back each original's file pages once it is cast.

    transformers leaves safetensors weights as views of the mapped file, whose pages stay resident
    until the last view dies: a plain model.float() holds the half-precision model and the FP32
    one at once (0.5B: 3.1 GiB peak at load instead of 2.2). The pages are file pages, so dropping
    them (madvise DONTNEED, whole pages inside the tensor, after the copy) only means a re-read
    if they are touched again.
    """
    ranges = _mapped_checkpoint_ranges()
    libc = ctypes.CDLL(None)
    page = mmap.PAGESIZE
    for module in model.modules():
        for p in module.parameters(recurse=False):
            if p.dtype == torch.float32 or not p.is_floating_point():
                continue
            old = p.data
            p.data = old.float()
            lo = old.data_ptr()
            hi = lo + old.numel() * old.element_size()
            start, end = -(-lo // page) * page, hi // page * page
            if old.is_contiguous() and end > start and any(a <= lo and hi <= b for a, b in ranges):
                libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(end - start), MADV_DONTNEED)
    model.float()  # buffers


@torch.no_grad()
def round_to_f16(model: nn.Module) -> None:
    """Round every weight to the nearest F16 value (kept in FP32), in place.

    llama.cpp's usual path quantizes an F16 GGUF, and ggml's Q4_0 rounds exact halves up. Weights
    that lie on a coarser grid (a checkpoint dequantized from 5 bits, as qwen-coder is) sit on
    those halves in FP32, so every one rounds the same way and biases its block; F16 rounding
    moves them off, both ways. On Qwen2.5-Coder-0.5B plain Q4_0 of the FP32 weights has KLD 0.140
    to FP16, of the F16 ones 0.132: the search has to start from the weights the baseline uses.
    """
    for p in model.parameters():
        if p.is_floating_point():
            p.data = p.data.half().float()


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
