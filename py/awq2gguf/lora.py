"""Merging a PEFT LoRA adapter into the checkpoint before calibration and AWQ (`--lora`).

The merge is peft's own (its LoRA layers know the scaling, rsLoRA, DoRA and the target-module
names): the adapter is injected into a copy of the model's structure on the meta device, and each
part (the embeddings, one decoder block, the final norm with the output matrix) is merged when
its turn comes, its base weights read by StreamedModel, so memory stays at one part whatever the
model's size. The merged model is written as a Hugging Face folder that the rest of the job
starts from, in F16 (the precision every job starts from anyway: streamed.round_to_f16).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import torch

from .checkpoint import first_line
from .errors import Awq2ggufError
from .progress import OnProgress, no_progress
from .streamed import StreamedModel

ADAPTER_NAME = "default"
WEIGHT_FILES = ("adapter_model.safetensors", "adapter_model.bin")


class LoraError(Awq2ggufError):
    pass


@dataclass(frozen=True)
class Adapter:
    path: Path
    config: object  # peft.LoraConfig
    weights: Path

    @property
    def name(self) -> str:
        return self.path.resolve().name

    @property
    def rank(self) -> int:
        return self.config.r

    def sha256(self) -> str:
        h = hashlib.sha256()
        with open(self.weights, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        return h.hexdigest()

    def state_dict(self) -> dict[str, torch.Tensor]:
        try:
            if self.weights.suffix == ".safetensors":
                from safetensors.torch import load_file

                return load_file(self.weights)
            return torch.load(self.weights, map_location="cpu", weights_only=True)
        except Exception as e:  # safetensors and torch raise many kinds here; all mean the same to the user
            raise LoraError(f"{self.weights} is truncated or corrupt: {first_line(e)}") from e


def read_adapter(path: Path) -> Adapter:
    """The adapter in path (adapter_config.json and its weights), checked to be a LoRA one."""
    from peft import PeftConfig, PeftType

    path = Path(path)
    if not path.is_dir():
        raise LoraError(f"{path} is not a directory: --lora takes a PEFT adapter folder")
    if not (path / "adapter_config.json").is_file():
        raise LoraError(f"{path} has no adapter_config.json: not a PEFT adapter folder")
    weights = next((path / f for f in WEIGHT_FILES if (path / f).is_file()), None)
    if weights is None:
        raise LoraError(f"{path} has no adapter weights ({' or '.join(WEIGHT_FILES)})")
    try:
        config = PeftConfig.from_pretrained(path)
    except Exception as e:  # peft raises many kinds here; all mean the same to the user
        raise LoraError(f"{path / 'adapter_config.json'} does not load: {first_line(e)}") from e
    if config.peft_type != PeftType.LORA:
        raise LoraError(f"{path} is a {config.peft_type.value} adapter: --lora merges LoRA adapters only")
    if getattr(config, "modules_to_save", None):
        raise LoraError(f"{path} also saves whole modules ({', '.join(config.modules_to_save)}): "
                        "--lora merges LoRA weights only")
    return Adapter(path, config, weights)


def _lora_model(base: StreamedModel, adapter: Adapter):
    """The model's structure on the meta device with the adapter's layers injected; a mismatch
    between adapter and model is a one-line error naming what does not fit."""
    from peft import inject_adapter_in_model
    from peft.tuners.lora import LoraLayer
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(base.model.config, dtype=torch.float32)
    try:
        inject_adapter_in_model(adapter.config, model, ADAPTER_NAME, low_cpu_mem_usage=True)
    except ValueError as e:  # peft: target modules not found in the model
        raise LoraError(f"the adapter in {adapter.path} does not fit {base.model_dir}: {first_line(e)}") from e
    layers = {name: m for name, m in model.named_modules() if isinstance(m, LoraLayer)}
    if base.tied:
        # Unmerged, a LoRA on one side of a tied matrix changes that side only; merged, both.
        shared = [name for name, m in base.model.named_modules() if m in (base.head, base.embed) and name in layers]
        if shared:
            raise LoraError(f"the adapter in {adapter.path} changes {shared[0]}, whose matrix this model ties "
                            "between its token embeddings and its output: a merge cannot keep that")
    return model, layers


def _module_of(key: str) -> str | None:
    """The module an adapter tensor belongs to (peft names them base_model.model.MODULE.lora_...)."""
    name = key.removeprefix("base_model.model.")
    for marker in (".lora_", ".base_layer."):
        if marker in name:
            return name.split(marker)[0]
    return None


def _part_state(adapter_sd: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """The adapter's tensors for the modules under prefix (its keys start with peft's base_model.model.)."""
    return {k: v for k, v in adapter_sd.items() if k.removeprefix("base_model.model.").startswith(prefix + ".")}


def merge(model_dir: Path, adapter: Adapter, out_dir: Path, dtype: torch.dtype = torch.float16,
          on_progress: OnProgress = no_progress) -> Path:
    """model_dir with adapter merged, written to out_dir as a Hugging Face folder (weights in dtype)."""
    from peft import set_peft_model_state_dict

    base = StreamedModel(model_dir, out_dir)
    model, layers = _lora_model(base, adapter)
    adapter_sd = adapter.state_dict()
    if stray := sorted(k for k in adapter_sd if _module_of(k) not in layers):
        raise LoraError(f"the adapter in {adapter.path} does not fit {base.model_dir}: {stray[0]} has no module there")
    for i, part in enumerate(base.parts):
        prefix = base.prefix[part]
        in_part = {n[len(prefix) + 1:]: m for n, m in layers.items() if n.startswith(prefix + ".") or n == prefix}
        base.load(part)
        if in_part:
            for layer in in_part.values():  # only the adapted modules take memory, not the whole part again
                layer.to_empty(device="cpu")
            try:
                result = set_peft_model_state_dict(model, _part_state(adapter_sd, prefix), ADAPTER_NAME)
            except RuntimeError as e:  # torch: size mismatch for ...
                detail = next((line.strip() for line in str(e).splitlines() if "size mismatch" in line), first_line(e))
                raise LoraError(f"the adapter in {adapter.path} does not fit {base.model_dir}: {detail}") from e
            if result.unexpected_keys:
                raise LoraError(f"the adapter in {adapter.path} does not fit {base.model_dir}: "
                                f"{result.unexpected_keys[0]} has no module there")
            for rel, layer in in_part.items():
                target = part.get_submodule(rel) if rel else part
                layer.get_base_layer().load_state_dict(target.state_dict())
                layer.merge(safe_merge=True)
                target.load_state_dict(layer.get_base_layer().state_dict())
                layer.to("meta")
        for p in part.parameters():
            p.data = p.data.to(dtype)
        base.save(part)
        on_progress(i + 1)
    return base.write_folder()
