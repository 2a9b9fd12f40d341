"""Outputs that appear only when complete: a file or folder is written beside its destination and
moved into place at the end."""

from __future__ import annotations

import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


@contextmanager
def atomic_path(dst: Path) -> Iterator[Path]:
    """A temporary path beside dst, for a file or a folder, that replaces dst only when the block
    completes: an error or Ctrl-C leaves neither a partial dst nor the temporary behind."""
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + ".tmp")
    _remove(tmp)
    try:
        yield tmp
        if tmp.is_dir():
            _remove(dst)
        os.replace(tmp, dst)
    finally:
        _remove(tmp)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
