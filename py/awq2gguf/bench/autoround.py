"""Intel's AutoRound as a peer in `bench awq`: its `gguf:q4_0` export, as written and at our file size.

`make autoround` installs it; it runs as the command a user would run, importing the vendored gguf-py
as our converter does (PyPI's gguf is older than the llama.cpp conversion code AutoRound bundles and
fails on Qwen2). It keeps a tied embedding/output matrix in Q8_0, a bigger file than all-Q4_0; `at_q4_0` puts
every tensor in Q4_0 with the patched llama-quantize, which copies the tensors that already are
(AutoRound's blocks unchanged) and rounds the others plainly.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

from ..builds import Build
from ..convert import vendored_gguf_env
from ..atomic import atomic_path
from ..errors import tool_failure
from ..llama_quantize import quantize
from .eval_text import calibration_windows
from .gguf_tensors import read_tensor_infos
from . import BenchError
from .peak_rss import run_with_peak_rss

VERSION = "0.16.1"
COMMAND = Path(sys.executable).with_name("auto-round")
# AutoRound drops a sample that tokenizes shorter than --seqlen and truncates the others: each
# window carries a few tokens more than it uses, since decoded text can re-tokenize shorter.
SPARE_TOKENS = 4
# No model hub at run time: AutoRound reads the local folder and the local dataset only.
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def available() -> bool:
    return COMMAND.is_file()


def calibration_jsonl(model_dir: Path, eval_text: Path, n_samples: int, n_tokens: int, out: Path) -> Path:
    """n_samples windows of the text `bench awq`'s calibration file comes from, one {"text": ...}
    line each, as AutoRound reads a local dataset."""
    windows = calibration_windows(model_dir, eval_text, n_samples, n_tokens + SPARE_TOKENS)
    out.write_text("".join(json.dumps({"text": w}) + "\n" for w in windows))
    return out


def quantize_q4_0(model_dir: Path, calib_jsonl: Path, n_samples: int, n_tokens: int, iters: int, out: Path,
                  threads: int) -> tuple[float, int]:
    """AutoRound's gguf:q4_0 of model_dir with `iters` tuning iterations per block (0: its optimized
    rounding without tuning), calibrated on calib_jsonl; (seconds, peak RSS bytes). out appears only
    when complete."""
    env = vendored_gguf_env(**OFFLINE, OMP_NUM_THREADS=str(threads))
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.name}.") as folder:
        folder = Path(folder)
        cmd = [str(COMMAND), "--model", str(model_dir), "--scheme", "gguf:q4_0", "--format", "gguf:q4_0",
               "--iters", str(iters), "--nsamples", str(n_samples), "--seqlen", str(n_tokens),
               "--dataset", str(calib_jsonl), "--device_map", "cpu", "--seed", "0", "--output_dir", str(folder)]
        start = time.monotonic()
        proc, peak = run_with_peak_rss(cmd, env=env)
        seconds = time.monotonic() - start
        if proc.returncode != 0:
            raise tool_failure(f"AutoRound {VERSION} on {model_dir}", proc.returncode, proc.stdout + proc.stderr,
                               BenchError)
        made = sorted(folder.rglob("*.gguf"))
        if len(made) != 1:
            raise BenchError(f"AutoRound {VERSION} wrote {len(made)} GGUF files into {folder}, expected one")
        with atomic_path(out) as tmp:
            made[0].rename(tmp)
    return seconds, peak


def at_q4_0(build: Build, src: Path, out: Path) -> Path:
    """src with every tensor in Q4_0: those already in Q4_0 copied as they are, the others rounded plainly."""
    return quantize(build, src, out, "Q4_0", extra_args=("--allow-requantize",))


def not_q4_0(path: Path) -> str:
    """The matrices of a GGUF that are not Q4_0, e.g. "token_embd Q8_0" or "Q8_0 x 24" ("" if none)."""
    by_type: dict[str, list[str]] = {}
    for t in read_tensor_infos(path):
        if len(t.ne) > 1 and t.type.name != "Q4_0":
            by_type.setdefault(t.type.name, []).append(t.name.removesuffix(".weight"))
    return ", ".join(f"{', '.join(names)} {kind}" if len(names) <= 2 else f"{kind} x {len(names)}"
                     for kind, names in by_type.items())
