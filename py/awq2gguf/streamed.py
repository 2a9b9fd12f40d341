"""A Hugging Face checkpoint held one part at a time, in FP32, with what AWQ folds saved part by part.

The searches need FP32 weights, and a whole 7B model in FP32 is 28 GB. So the model is built with
its parameters on the meta device (no memory), and each part (the token embeddings, one decoder
block, the final norm with the output matrix) gets its FP32 weights from the checkpoint's files when its
turn comes and lets them go after (awq.forward.Weights). What the search changes is saved as one
safetensors shard per part; write_folder() completes the folded Hugging Face folder from the
checkpoint for the parts it never changed. Peak memory is one part plus the activations,
whatever the number of blocks. When the GGUF will be Q4_0, the matrices are saved as the Q4_0
they become (q4_0_as_gptq): the folded folder then takes an eighth of FP32's disk.
"""

from __future__ import annotations

import ctypes
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from . import q4_0_as_gptq
from .checkpoint import CheckpointError, architecture, copy_other_files, first_line
from .grids import Q4_0, grid_of

WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin")
_MALLOC_TRIM = getattr(ctypes.CDLL(None), "malloc_trim", None)  # glibc only


def _give_back_freed_memory() -> None:
    """glibc keeps freed blocks under its mmap threshold (which grows to 32 MB: most of a
    block's tensors) in its heaps, where they fragment: without this, RSS grew with every block; with
    it, it stays flat (bench/results/README.md, awq2gguf's cost by model size)."""
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


def round_to_f16(t: torch.Tensor) -> torch.Tensor:
    """t in FP32, rounded to the nearest F16 value.

    llama.cpp's usual path quantizes an F16 GGUF, and ggml's Q4_0 rounds exact halves up. Weights
    that lie on a coarser grid (a checkpoint dequantized from 5 bits, as qwen-coder is) sit on
    those halves in FP32, so every one rounds the same way and biases its block; F16 rounding
    moves them off, both ways, and plain Q4_0 of the F16 weights is the closer to FP16: the search
    has to start from the weights the baseline uses (bench/results/README.md, Figures that were in
    code comments).
    """
    return t.float().half().float()


class _TensorFiles:
    """Where each named tensor lives (safetensors or PyTorch .bin files); reads a few at a time,
    each file opened only for as long as the read, so its pages do not stay mapped."""

    def __init__(self):
        self.where: dict[str, Path] = {}

    @classmethod
    def of_folder(cls, model_dir: Path) -> "_TensorFiles":
        """The folder's weights, every file opened once now: a missing, truncated or corrupt
        shard fails here, before any slow work."""
        for index_name in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
            if (index := model_dir / index_name).is_file():
                try:
                    weight_map = json.loads(index.read_text())["weight_map"]
                except (ValueError, KeyError, TypeError) as e:
                    raise CheckpointError(f"{index} is not a weight index: {first_line(e)}") from e
                files = sorted({model_dir / f for f in weight_map.values()})
                break
        else:
            files = next((found for p in WEIGHT_PATTERNS if (found := sorted(model_dir.glob(p)))), [])
        if not files:
            raise CheckpointError(f"{model_dir} has no weights ({' or '.join(WEIGHT_PATTERNS)})")
        found = cls()
        for f in files:
            if not f.is_file():
                raise CheckpointError(f"{f.name}, named in {model_dir}'s weight index, is missing")
            for name in _read(f, None):
                found.where[name] = f
        return found

    def read(self, names: list[str]) -> dict[str, torch.Tensor]:
        by_file: dict[Path, list[str]] = {}
        for n in names:
            by_file.setdefault(self.where[n], []).append(n)
        return {n: t for f, wanted in by_file.items() for n, t in _read(f, wanted).items()}


def _read(f: Path, names: list[str] | None) -> dict[str, torch.Tensor | None]:
    """The named tensors of file f (copies: nothing keeps the file mapped), or with names=None
    just which it holds."""
    try:
        if f.suffix == ".safetensors":
            from safetensors import safe_open

            with safe_open(f, framework="pt") as h:
                if names is None:
                    return dict.fromkeys(h.keys())
                return {n: h.get_tensor(n).clone() for n in names}
        tensors = torch.load(f, map_location="cpu", mmap=True, weights_only=True)
        return dict.fromkeys(tensors) if names is None else {n: tensors[n].clone() for n in names}
    except Exception as e:  # safetensors and torch raise many kinds here; all mean the same to the user
        raise CheckpointError(f"{f} is truncated or corrupt: {first_line(e)}") from e


@dataclass(frozen=True)
class Saved:
    """What a StreamedModel had saved at a branch(): its folder, tensor files and names."""
    folded_dir: Path
    where: dict[str, Path]
    saved: dict[str, list[str]]


class StreamedModel:
    """model_dir's model on the meta device, whose parts load their weights one at a time (FP32,
    rounded to F16) and save them into folded_dir (awq.forward.Weights). With untie_output, the
    output matrix is a copy of the token embeddings of its own. With as_q4_0, matrices are saved
    as their Q4_0 (what loads back is its values), but for a part whose grid is another
    (grids.grid_of: the output matrix kept in Q8_0)."""

    def __init__(self, model_dir: Path, folded_dir: Path, untie_output: bool = False, as_q4_0: bool = False):
        from accelerate import init_empty_weights
        from transformers import AutoConfig, AutoModelForCausalLM

        self.model_dir, self.folded_dir = Path(model_dir), Path(folded_dir)
        architecture(self.model_dir)
        self.checkpoint = _TensorFiles.of_folder(self.model_dir)
        try:
            config = AutoConfig.from_pretrained(self.model_dir)
        except Exception as e:  # transformers raises many kinds here; all mean the same to the user
            raise CheckpointError(f"the config in {self.model_dir} does not load: {first_line(e)}") from e
        if untie_output:
            config.tie_word_embeddings = config.get_text_config().tie_word_embeddings = False
        # Parameters on the meta device; buffers are made at construction (the rotary tables,
        # Gemma's embedding scale) and are not in the checkpoint, so they are made for real.
        with init_empty_weights(include_buffers=False):
            model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        model.tie_weights()  # what was tied at construction is two meta parameters now
        self.model = model.eval()
        self.embed, self.head = model.get_input_embeddings(), model.get_output_embeddings()
        self.tied = self.head.weight is self.embed.weight
        # The parts, in checkpoint order; each is saved as one shard.
        self.parts = [self.embed, *model.model.layers, model.model.norm] + ([] if self.tied else [self.head])
        self.prefix = {m: name for name, m in model.named_modules() if m in self.parts}
        self.as_q4_0 = as_q4_0
        self.folded = _TensorFiles()  # the saved tensors (a Q4_0 matrix is several)
        self.saved: dict[str, list[str]] = {}  # parameter name -> the names it is saved under
        self.sources = {}  # parameter name -> where the checkpoint has it
        for part in self.parts:
            for name in self._names(part):
                self.sources[name] = name
        if not self.tied and self._name(self.head, "weight") not in self.checkpoint.where:
            self.sources[self._name(self.head, "weight")] = self._name(self.embed, "weight")  # untied by us
        missing = sorted(n for n in self.sources.values() if n not in self.checkpoint.where)
        if missing:
            raise CheckpointError(f"the weights in {self.model_dir} lack {len(missing)} tensors, e.g. {missing[0]}")

    def drop_blocks(self, blocks) -> None:
        """Remove these decoder blocks (indices into the current ones) and renumber the others, as
        the folded folder and its config will have them; before anything is saved."""
        if self.saved:
            raise RuntimeError("blocks are dropped before any part is saved")
        layers, config = self.model.model.layers, self.model.config.get_text_config()
        kept = [i for i in range(len(layers)) if i not in set(blocks)]
        was = {part: self._names(part) for part in self.parts}
        self.model.model.layers = nn.ModuleList(layers[i] for i in kept)
        for new_index, layer in enumerate(self.model.model.layers):
            layer.self_attn.layer_idx = new_index
        config.num_hidden_layers = len(kept)
        if getattr(config, "layer_types", None):
            config.layer_types = [config.layer_types[i] for i in kept]
        self.parts = [p for p in self.parts if p not in {layers[i] for i in blocks}]
        self.prefix = {m: name for name, m in self.model.named_modules() if m in self.parts}
        self.sources = {new: self.sources[old] for part in self.parts
                        for new, old in zip(self._names(part), was[part], strict=True)}

    def _name(self, part: nn.Module, param: str) -> str:
        return f"{self.prefix[part]}.{param}"

    def _names(self, part: nn.Module) -> list[str]:
        return [self._name(part, n) for n, _ in part.named_parameters()]

    def _parts(self, modules) -> list[nn.Module]:
        """The parts that hold these modules' weights (a tied output matrix is the embeddings)."""
        return [self.embed if m is self.head and self.tied else m for m in modules]

    def _assign(self, part: nn.Module, tensors: dict[str, torch.Tensor]) -> None:
        """Give part these weights, keyed by parameter name within the part."""
        for name, t in tensors.items():
            owner, _, attr = name.rpartition(".")
            setattr(part.get_submodule(owner), attr, nn.Parameter(t, requires_grad=False))
        if self.tied:
            self.head.weight = self.embed.weight

    def original(self) -> "Original":
        """A Weights store (awq.forward.Weights) of this model's checkpoint weights, for the FP reference."""
        return Original(self)

    def load(self, *modules: nn.Module, original: bool = False) -> None:
        """Give the modules their latest weights (the last saved, else the checkpoint's), or with
        original the checkpoint's whatever was saved since."""
        for part in self._parts(modules):
            names = self._names(part)
            folded = [] if original else [n for n in names if n in self.saved]
            fresh = [n for n in names if n not in folded]
            stored = self.folded.read([s for n in folded for s in self.saved[n]])
            tensors = {n: stored[n] if n in stored else q4_0_as_gptq.unpack(n, stored) for n in folded}
            checkpoint = self.checkpoint.read([self.sources[n] for n in fresh])
            tensors.update((n, round_to_f16(checkpoint[self.sources[n]])) for n in fresh)
            self._assign(part, {local: tensors[self._name(part, local)] for local, _ in part.named_parameters()})

    def save(self, *modules: nn.Module) -> None:
        from safetensors.torch import save_file

        for part in self._parts(modules):
            f = self.folded_dir / f"model-{self.parts.index(part) + 1:05d}.safetensors"
            self.folded_dir.mkdir(parents=True, exist_ok=True)
            tensors = {}
            for local, p in part.named_parameters():
                name, w = self._name(part, local), p.detach().contiguous()
                as_q4_0 = self.as_q4_0 and grid_of(part) is Q4_0 and q4_0_as_gptq.packable(name, w)
                stored = q4_0_as_gptq.pack(name, w) if as_q4_0 else {name: w}
                tensors.update(stored)
                self.saved[name] = list(stored)
            save_file(tensors, f)
            self.folded.where.update(dict.fromkeys(tensors, f))
        self.release(*modules)

    def release(self, *modules: nn.Module) -> None:
        for part in self._parts(modules):
            self._assign(part, {n: torch.empty_like(p, device="meta") for n, p in part.named_parameters()})
        _give_back_freed_memory()

    def branch(self, folded_dir: Path) -> Saved:
        """Save from now on into folded_dir, leaving the files saved so far as they are, so that
        restore() can go back to them (e.g. when tuning loses to the model it started from)."""
        before = Saved(self.folded_dir, dict(self.folded.where), dict(self.saved))
        self.folded_dir = Path(folded_dir)
        return before

    def restore(self, before: Saved) -> None:
        """Back to what was saved at branch(): the files saved since are deleted."""
        for f in set(self.folded.where.values()) - set(before.where.values()):
            f.unlink()
        self.folded_dir = before.folded_dir
        self.folded.where, self.saved = dict(before.where), dict(before.saved)

    def reset(self) -> None:
        """Forget everything saved: the folded folder will hold the checkpoint's weights."""
        for f in set(self.folded.where.values()):
            f.unlink()
        self.folded = _TensorFiles()
        self.saved = {}

    def write_folder(self) -> Path:
        """The folded Hugging Face folder: saved parts as they are, the others from the checkpoint."""
        self.folded_dir.mkdir(parents=True, exist_ok=True)
        for f in set(self.folded.where.values()):
            if f.parent != self.folded_dir:  # saved before a branch() and not saved again since
                f.rename(self.folded_dir / f.name)
        self.folded.where = {n: self.folded_dir / f.name for n, f in self.folded.where.items()}
        for part in self.parts:
            if not all(n in self.saved for n in self._names(part)):
                self.load(part)
                self.save(part)
        weight_map = {n: f.name for n, f in self.folded.where.items()}
        # transformers wants the metadata too (the merged model of --lora is loaded by it in tests).
        total = sum(f.stat().st_size for f in set(self.folded.where.values()))
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (self.folded_dir / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
        self.model.config.save_pretrained(self.folded_dir)
        if self.as_q4_0:
            config = json.loads((self.folded_dir / "config.json").read_text())
            config["quantization_config"] = q4_0_as_gptq.QUANTIZATION_CONFIG
            (self.folded_dir / "config.json").write_text(json.dumps(config, indent=2))
        copy_other_files(self.model_dir, self.folded_dir)
        return self.folded_dir

    def n_params(self) -> int:
        return sum(p.numel() for p in self.model.parameters())


class Original:
    """The checkpoint's weights of a StreamedModel's parts, read-only (what tuning matches block by block)."""

    def __init__(self, streamed: StreamedModel):
        self.streamed = streamed

    def load(self, *modules: nn.Module) -> None:
        self.streamed.load(*modules, original=True)

    def save(self, *modules: nn.Module) -> None:
        raise RuntimeError("the checkpoint's weights are never saved")

    def release(self, *modules: nn.Module) -> None:
        self.streamed.release(*modules)
