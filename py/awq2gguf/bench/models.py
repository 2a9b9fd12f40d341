"""Models for `bench`: the synthetic default and SmolLM2, quantized by each build's own llama-quantize."""

from __future__ import annotations

from pathlib import Path

from ..builds import Build, get_build
from ..assets.dev_models import f16_gguf
from ..paths import MODELS_DIR
from ..llama_quantize import quantize
from ..assets.synthetic import SHAPES, write_synthetic_gguf


def synthetic_f16(shape_name: str, log=print) -> Path:
    path = MODELS_DIR / f"synthetic-{shape_name}-f16.gguf"
    if not path.is_file():
        log(f"generating synthetic {shape_name} (random weights, real Qwen2 vocabulary) -> {path}")
        write_synthetic_gguf(SHAPES[shape_name], path)
    return path


def quantized_by(build: Build, src: Path, qtype: str, log=print) -> Path:
    """src quantized to qtype by `build`; redone when that build's quantizer is newer than the file."""
    dst = MODELS_DIR / f"{src.name.removesuffix('-f16.gguf').removesuffix('.gguf')}-{qtype}.{build.name}.gguf"
    tool = build.tool("llama-quantize")
    newest_input = max(p.stat().st_mtime for p in (src, tool, build.lib_dir / "libllama.so"))
    if not dst.is_file() or dst.stat().st_mtime < newest_input:
        log(f"quantizing {src.name} to {qtype} with the {build.name} llama-quantize -> {dst}")
        quantize(build, src, dst, qtype)
    return dst


def dev_model_suite(name: str, log=print) -> list[Path]:
    """A development model as FP16, stock-quantized Q4_0 and patched-quantized (all-)Q4_0."""
    f16 = f16_gguf(name)
    return [f16, *(quantized_by(get_build(name), f16, "Q4_0", log) for name in ("stock", "patched"))]
