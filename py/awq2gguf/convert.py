"""Hugging Face folder -> GGUF with the vendored llama.cpp converter.

The converter must run against the vendored gguf-py (newer than PyPI's gguf despite the same
version string), so it runs in a child process with that package first on PYTHONPATH.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .paths import VENDOR_SRC
from .quantize import override_kv_args

CONVERTER = VENDOR_SRC / "convert_hf_to_gguf.py"


class ConvertError(RuntimeError):
    pass


def convert_hf_to_gguf(model_dir: Path, out: Path, outtype: str = "f16", metadata: dict[str, str] | None = None) -> Path:
    """Convert model_dir to an `outtype` GGUF at out, with metadata items added last ({key:
    "TYPE:VALUE"}, as llama-quantize's --override-kv); out appears only when complete."""
    if not CONVERTER.is_file():
        raise ConvertError(f"{CONVERTER} not found: run `make vendor` first")
    out = Path(out)
    tmp = out.with_name(out.name + ".tmp")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(VENDOR_SRC / "gguf-py"),
                                                                     os.environ.get("PYTHONPATH")])))
    try:
        cmd = [sys.executable, str(CONVERTER), str(model_dir), "--outfile", str(tmp), "--outtype", outtype,
               *override_kv_args(metadata)]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, errors="replace")
        if proc.returncode != 0:
            tail = "\n".join(proc.stderr.strip().splitlines()[-12:])
            raise ConvertError(f"convert_hf_to_gguf.py failed on {model_dir}:\n{tail}")
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out
