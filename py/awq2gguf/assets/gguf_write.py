"""Writing new GGUF files: atomically, with metadata copied from another GGUF."""

from __future__ import annotations

import functools
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from gguf import GGUFReader, GGUFValueType, GGUFWriter

from ..atomic import atomic_path


@functools.cache
def read_fields(path: Path) -> tuple[tuple[str, object, GGUFValueType], ...]:
    """(key, value, type) of every metadata item; cached, as GGUFReader takes seconds on big vocabularies."""
    reader = GGUFReader(path)
    return tuple((key, field.contents(), field.types[0])
                 for key, field in reader.fields.items() if not key.startswith("GGUF."))


def copy_fields(src: Path, writer: GGUFWriter, keep: Callable[[str], bool]) -> None:
    """Add src's items whose key passes `keep` (general.architecture comes from the writer)."""
    for key, value, vtype in read_fields(Path(src)):
        if key == "general.architecture" or not keep(key):
            continue
        if vtype == GGUFValueType.ARRAY:
            writer.add_array(key, value)
        else:
            writer.add_key_value(key, value, vtype)


@contextmanager
def atomic_writer(dst: Path, arch: str) -> Iterator[GGUFWriter]:
    """A GGUFWriter whose file becomes `dst` only if the block completes; an error or Ctrl-C leaves
    no partial file behind."""
    with atomic_path(dst) as tmp:
        writer = GGUFWriter(tmp, arch)
        try:
            yield writer
        finally:
            writer.close()
