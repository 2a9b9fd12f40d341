"""The awq2gguf.* keys of a GGUF's metadata, saying how the file was made: written by the pipeline
(through llama-quantize's or the converter's --override-kv), read back for the chat page and the benches."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from gguf import GGUFReader

PREFIX = "awq2gguf."
# llama.cpp's override holds a string in 128 bytes, its terminator included.
MAX_STR_BYTES = 127

Value = bool | int | float | str | Sequence[float] | None


def _text(value: float | int) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)  # in a list: short


def overrides(fields: Mapping[str, Value]) -> dict[str, str]:
    """{awq2gguf.NAME: "TYPE:VALUE"} (the --override-kv form) of {NAME: value}. A sequence of numbers
    becomes a comma-separated str (an override holds no arrays); a None value is left out."""
    out = {}
    for name, value in fields.items():
        if value is None:
            continue
        if isinstance(value, bool):  # before int: a bool is an int
            typed = f"bool:{str(value).lower()}"
        elif isinstance(value, int):
            typed = f"int:{value}"
        elif isinstance(value, float):
            typed = f"float:{value!r}"  # every digit: the file's float32 is then the nearest to the value
        elif isinstance(value, str):
            typed = "str:" + value.encode()[:MAX_STR_BYTES].decode(errors="ignore")
        elif isinstance(value, Sequence):
            typed = "str:" + ",".join(map(_text, value))
        else:
            raise TypeError(f"metadata {name}: {type(value).__name__} is not a GGUF override type")
        out[PREFIX + name] = typed
    return out


def provenance(model: Path) -> list[tuple[str, str]]:
    """(NAME without the prefix, value as text) of the GGUF's awq2gguf metadata; empty if it has none."""
    def text(value) -> str:
        return f"{value:.4g}" if isinstance(value, float) else str(value)  # float32 fields read back long
    return [(name.removeprefix(PREFIX), text(field.contents())) for name, field in GGUFReader(model).fields.items()
            if name.startswith(PREFIX)]
