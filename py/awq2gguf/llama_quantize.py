"""Quantize a GGUF with one build's llama-quantize, writing the result atomically."""

from __future__ import annotations

from pathlib import Path

from .builds import Build
from .atomic import atomic_path
from .errors import Awq2ggufError
from .processes import run_tool


class QuantizeError(Awq2ggufError):
    pass


def override_kv_args(metadata: dict[str, str] | None) -> list[str]:
    """--override-kv arguments adding metadata {key: "TYPE:VALUE"} (TYPE int, float, bool or str),
    for llama-quantize and for the converter (patch 0013)."""
    return [a for k, v in (metadata or {}).items() for a in ("--override-kv", f"{k}={v}")]


def quantize(build: Build, src: Path, dst: Path, qtype: str = "Q4_0", threads: int | None = None,
             extra_args: tuple[str, ...] = (), metadata: dict[str, str] | None = None) -> Path:
    """`llama-quantize [extra_args] src dst qtype [threads]`, with metadata items added last;
    dst appears only when complete."""
    with atomic_path(dst) as tmp:
        cmd = [str(build.tool("llama-quantize")), *extra_args, *override_kv_args(metadata), str(src), str(tmp), qtype]
        if threads:
            cmd.append(str(threads))
        run_tool(cmd, f"{build.name} llama-quantize on {src}", build.env(), QuantizeError)
    return Path(dst)
