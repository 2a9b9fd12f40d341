#!/usr/bin/env python3
"""Copy of A.gguf in which every tensor whose name does not match one of the patterns comes from B.gguf.

    scripts/mix-gguf-tensors.py A.gguf B.gguf OUT.gguf 'blk\\.8\\..*' ['output.*' ...]

For per-block ablations of awq2gguf (issue 14): with A an awq2gguf all-Q4_0 file and B the plain
all-Q4_0 of the same model, OUT is the plain model with A's choices in the matching tensors only.
A decoder block's scales fold into its own norms and linears, so a block taken whole is a
consistent model. Both files must hold the same tensors (names, types, shapes); OUT keeps A's
metadata. Patterns are Python regular expressions matched against whole tensor names.
"""

import re
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "vendor" / "llama.cpp" / "gguf-py"))
from gguf import GGUFReader  # noqa: E402

from awq2gguf.atomic import atomic_path  # noqa: E402


def _tensors(path: str) -> list:
    try:
        return GGUFReader(path).tensors
    except (OSError, ValueError) as e:
        sys.exit(f"{path}: not a readable GGUF file ({e})")


def main(a: str, b: str, out: str, *patterns: str) -> None:
    ours = _tensors(a)
    others = {t.name: t for t in _tensors(b)}
    kept = 0
    with atomic_path(Path(out)) as tmp:
        shutil.copyfile(a, tmp)
        with open(tmp, "r+b") as f:
            for t in ours:
                if any(re.fullmatch(p, t.name) for p in patterns):
                    kept += 1
                    continue
                o = others.get(t.name)
                if o is None or o.tensor_type != t.tensor_type or list(o.shape) != list(t.shape):
                    sys.exit(f"{b} has no tensor {t.name} of {a}'s type and shape")
                f.seek(t.data_offset)
                f.write(o.data.tobytes())
    print(f"{out}: {kept} tensors from {a}, the rest from {b}")


if __name__ == "__main__":
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    main(*sys.argv[1:])
