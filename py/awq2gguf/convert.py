"""Hugging Face folder -> GGUF with the vendored llama.cpp converter.

The converter must run against the vendored gguf-py (newer than PyPI's gguf despite the same
version string), so it runs in a child process with that package first on PYTHONPATH.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

from .paths import VENDOR_SRC
from .atomic import atomic_path
from .errors import Awq2ggufError
from .processes import run_tool
from .llama_quantize import override_kv_args

CONVERTER = VENDOR_SRC / "convert_hf_to_gguf.py"


class ConvertError(Awq2ggufError):
    pass


def vendored_gguf_env(**extra: str) -> dict[str, str]:
    """This process's environment, with extra items and the vendored gguf-py first on PYTHONPATH:
    for a child that imports gguf (the converter, AutoRound's GGUF export)."""
    path = [str(VENDOR_SRC / "gguf-py"), os.environ.get("PYTHONPATH")]
    return {**os.environ, **extra, "PYTHONPATH": os.pathsep.join(filter(None, path))}


def convert_hf_to_gguf(model_dir: Path, out: Path, outtype: str = "f16", metadata: dict[str, str] | None = None,
                       tensor_types: dict[str, str] | None = None) -> Path:
    """Convert model_dir to an `outtype` GGUF at out, with metadata items added last ({key:
    "TYPE:VALUE"}, as llama-quantize's --override-kv) and the tensors named in tensor_types ({GGUF
    name: type}) in their own type (patch 0024); out appears only when complete."""
    if not CONVERTER.is_file():
        raise ConvertError(f"{CONVERTER} not found: run `make vendor` first")
    with atomic_path(out) as tmp:
        cmd = [sys.executable, str(CONVERTER), str(model_dir), "--outfile", str(tmp), "--outtype", outtype,
               *override_kv_args(metadata),
               *(a for name, qtype in (tensor_types or {}).items()
                 for a in ("--tensor-type", f"^{re.escape(name)}$={qtype}"))]
        run_tool(cmd, f"convert_hf_to_gguf.py on {model_dir}", vendored_gguf_env(), ConvertError)
    return Path(out)
