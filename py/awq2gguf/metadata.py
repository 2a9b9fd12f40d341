"""How a GGUF was made, as awq2gguf recorded it in the file's metadata (awq2gguf.* keys, written by
pipeline.provenance), read back for the chat page and the benches."""

from __future__ import annotations

from pathlib import Path

from gguf import GGUFReader

PREFIX = "awq2gguf."


def provenance(model: Path) -> list[tuple[str, str]]:
    """(key without the prefix, value as text) of the GGUF's awq2gguf metadata; empty if it has none."""
    def text(value) -> str:
        return f"{value:.4g}" if isinstance(value, float) else str(value)  # float32 fields read back long
    return [(name.removeprefix(PREFIX), text(field.contents())) for name, field in GGUFReader(model).fields.items()
            if name.startswith(PREFIX)]
