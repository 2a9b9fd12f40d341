"""Calibration tokens for AWQ: windows of a text file, or text the model samples itself.

Both give a (samples, tokens) tensor of token ids plus a description of where they came from,
which ends up in the GGUF's metadata.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from .builds import Build


class CalibrationError(ValueError):
    pass


@dataclass(frozen=True)
class Calibration:
    input_ids: torch.Tensor  # (samples, tokens)
    source: str

    @property
    def n_samples(self) -> int:
        return self.input_ids.shape[0]

    @property
    def n_tokens(self) -> int:
        return self.input_ids.shape[1]


def read_text(path: Path) -> str:
    """Plain text, or jsonl with one {"text": ...} object per line (joined by blank lines)."""
    path = Path(path)
    if not path.is_file():
        raise CalibrationError(f"calibration file {path} does not exist")
    try:
        raw = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise CalibrationError(f"calibration file {path} is not UTF-8 text ({e.reason} at byte {e.start})") from e
    if path.suffix != ".jsonl":
        return raw
    texts = []
    for n, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        try:
            texts.append(json.loads(line)["text"])
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise CalibrationError(f"{path}:{n}: expected a JSON object with a \"text\" field") from e
    return "\n\n".join(texts)


def from_text(tokenizer, text: str, n_samples: int, n_tokens: int, source: str) -> Calibration:
    """n_samples windows of n_tokens tokens, spread evenly over the tokenized text."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    need = n_samples * n_tokens
    if len(ids) < need:
        raise CalibrationError(
            f"{source} has {len(ids)} tokens; {n_samples} samples of {n_tokens} tokens need {need}. "
            f"Give more text, or lower --calib-samples / --calib-tokens")
    stride = (len(ids) - n_tokens) // max(n_samples - 1, 1)
    windows = [ids[i * stride:i * stride + n_tokens] for i in range(n_samples)]
    return Calibration(torch.tensor(windows), f"file:{Path(source).name}")


def from_file(tokenizer, path: Path, n_samples: int, n_tokens: int) -> Calibration:
    return from_text(tokenizer, read_text(path), n_samples, n_tokens, str(path))


def generated(build: Build, f16_gguf: Path, n_samples: int, n_tokens: int, seed: int, threads: int,
              on_step: Callable[[int, int], None] = lambda done, total: None) -> Calibration:
    """n_samples sequences the model samples itself with llama.cpp (see calibration_worker)."""
    with tempfile.TemporaryDirectory(prefix="awq2gguf-calib-") as tmp:
        out, log = Path(tmp) / "ids.npy", Path(tmp) / "llama.log"
        cmd = [sys.executable, "-m", "awq2gguf.calibration_worker", str(f16_gguf), str(out),
               str(n_samples), str(n_tokens), str(seed), str(threads)]
        with log.open("w") as err, subprocess.Popen(cmd, env=build.env(), stdout=subprocess.PIPE,
                                                    stderr=err, text=True) as proc:
            for line in proc.stdout:  # "done total" after each decoding step
                on_step(*map(int, line.split()))
        if proc.returncode != 0:
            tail = "\n".join(log.read_text(errors="replace").strip().splitlines()[-10:])
            raise CalibrationError(f"sampling calibration text with {build.name} llama.cpp failed:\n{tail}")
        ids = np.load(out)
    return Calibration(torch.from_numpy(ids).long(), f"generated:seed={seed}")
