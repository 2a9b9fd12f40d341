"""Calibration tokens for AWQ: windows of a text file, or text the model samples itself.

Both give a (samples, tokens) tensor of token ids plus a description of where they came from,
which ends up in the GGUF's metadata. The last `n_held_out` samples are not searched on: they
check the finished model against plain Q4_0.
"""

from __future__ import annotations

import json
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .builds import Build
from .errors import Awq2ggufError
from .processes import stream_tool
from .progress import OnProgress, no_progress


class CalibrationError(Awq2ggufError):
    pass


@dataclass(frozen=True)
class Calibration:
    input_ids: torch.Tensor  # (samples, tokens), the held-out samples last
    source: str
    n_held_out: int = 0

    @property
    def n_samples(self) -> int:
        """Samples the search sees."""
        return self.input_ids.shape[0] - self.n_held_out

    @property
    def search_ids(self) -> torch.Tensor:
        return self.input_ids[:self.n_samples]

    def spread_ids(self, n: int) -> torch.Tensor:
        """n (at most n_samples; all at n_samples) of the search's samples spread evenly over them: over
        a file's windows, which follow its text, and over self-sampled text's openings and prompts,
        which alternate."""
        return self.search_ids[torch.linspace(0, self.n_samples - 1, n).round().long()]

    @property
    def held_out_ids(self) -> torch.Tensor:
        return self.input_ids[self.n_samples:]

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


def start_ids(tokenizer) -> list[int]:
    """The ids the tokenizer puts before any text ([BOS] for Gemma, none for Qwen2 or SmolLM2)."""
    bare = tokenizer("a", add_special_tokens=False)["input_ids"]
    full = tokenizer("a")["input_ids"]
    return full[:full.index(bare[0])] if bare and bare[0] in full else []


def from_text(tokenizer, text: str, n_samples: int, n_tokens: int, source: str, n_held_out: int = 0) -> Calibration:
    """n_samples + n_held_out windows of n_tokens tokens, spread evenly over the tokenized text
    (the held-out ones are the last, from the end of the text). Each window starts as the tokenizer
    starts any text, as llama-perplexity's do: Gemma, which adds BOS, is far from its own behaviour
    without it (its block-wise tuning fitted that and lost in llama.cpp)."""
    start = start_ids(tokenizer)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    total = n_samples + n_held_out
    n_text = n_tokens - len(start)
    need = total * n_text
    if len(ids) < need:
        raise CalibrationError(
            f"{source} has {len(ids)} tokens; {n_samples} + {n_held_out} held-out samples of {n_tokens} tokens "
            f"need {need}. Give more text, or lower --calib-samples / --calib-held-out / --calib-tokens")
    stride = (len(ids) - n_text) // max(total - 1, 1)
    windows = [start + ids[i * stride:i * stride + n_text] for i in range(total)]
    return Calibration(torch.tensor(windows), f"file:{Path(source).name}", n_held_out)


def from_file(tokenizer, path: Path, n_samples: int, n_tokens: int, n_held_out: int = 0) -> Calibration:
    return from_text(tokenizer, read_text(path), n_samples, n_tokens, str(path), n_held_out)


def check_vocabulary(ids: list[list[int]] | torch.Tensor, n_vocab: int) -> None:
    """Fail before the slow work if the tokenizer gave ids the model has no embedding for (the
    lookup, or llama.cpp's sampler, would fail on them far from the cause)."""
    top = max((int(max(row)) for row in ids), default=-1)
    if top >= n_vocab:
        raise CalibrationError(f"the tokenizer gives token id {top}, past the model's vocabulary of {n_vocab}: "
                               "the folder's tokenizer does not belong with its weights")


# Self-sampled text starts, in turn, from a passage opening (continued as plain text) and from a
# chat prompt (through the chat template): left to itself from BOS a model writes what it was tuned
# for most (a coder model writes code), while the quantized model will meet prose, code and
# questions alike. The openings, written for this project, set the register of what follows.
OPENINGS = (
    "The Hanseatic League was a commercial and defensive confederation of merchant guilds and market "
    "towns in Central and Northern Europe. Growing from a few North German towns in the late 12th century, "
    "it came to dominate Baltic maritime trade for three centuries, and its",
    "def load_config(path):\n    \"\"\"Read a TOML configuration file and fill in the defaults.\"\"\"\n"
    "    with open(path, \"rb\") as f:\n        data = tomllib.load(f)\n    settings = dict(DEFAULTS)\n",
    "The rain had not stopped for three days when Marta finally opened the letter. She read it twice "
    "standing by the window, then sat down at the kitchen table and read it again, slowly, as if the",
    "Photosynthesis is the process by which green plants, algae and some bacteria convert light energy "
    "into chemical energy. In the first stage, the light-dependent reactions take place in the thylakoid "
    "membranes, where",
    "City council members voted 7-2 on Tuesday night to approve a new budget that sets aside $4.2 million "
    "for road repairs, after more than two hours of public comment. Supporters said the plan",
    "A train leaves the station at 9:40 and travels at an average speed of 72 km/h. A second train leaves "
    "the same station 25 minutes later on a parallel track at 90 km/h. How long after the first train "
    "leaves does the second one catch up?\n\nSolution: ",
    "Q: My sourdough starter rises well but the bread comes out dense and flat. I feed it twice a day "
    "with equal weights of flour and water. What am I doing wrong?\n\nA: ",
    "Born in 1867 in Warsaw, she was the fifth and youngest child of two teachers. Barred from the "
    "university because she was a woman, she studied in secret at the clandestine Flying University "
    "before moving to Paris in 1891, where",
    "#include <stdio.h>\n#include <stdlib.h>\n\n/* Count the words in a file given on the command line. */\n"
    "int main(int argc, char **argv)\n{\n    if (argc != 2) {\n",
    "Mount Kilimanjaro is a dormant volcano in Tanzania and the highest mountain in Africa, about 5,895 "
    "metres above sea level. It has three volcanic cones, Kibo, Mawenzi and Shira, and",
    "\"You're late,\" said the old man without looking up from the chessboard.\n\"The bus broke down,\" "
    "Tom said. \"I ran the last two miles.\"\n\"Sit down, then.",
    "Installation\n\nThe package requires Python 3.9 or later. Install it from PyPI with pip, then run "
    "the setup command once to create the configuration directory. On Windows,",
)

PROMPTS = (
    "Write a short story about a lighthouse keeper.",
    "Write a Python function that merges two sorted lists, and explain it.",
    "Why is the sky blue? Explain it to a curious twelve-year-old.",
    "Summarise the causes of the First World War in a few paragraphs.",
    "What are the pros and cons of remote work?",
    "Write a SQL query that finds the ten customers with the largest total orders.",
    "Describe the water cycle step by step.",
    "Translate into French and explain the grammar: 'I would have come if I had known.'",
    "Write a C function that reverses a linked list in place.",
    "Give me a recipe for a simple vegetable soup.",
    "What is the difference between a virus and a bacterium?",
    "Write a letter to a friend about your recent trip to the mountains.",
)

MIN_ANSWER = 16  # tokens each sampled answer gets at least


def start_texts(n: int) -> list[tuple[str, bool]]:
    """The n sequences' starts as (text, through the chat template): openings and prompts in turn."""
    return [(PROMPTS[i // 2 % len(PROMPTS)], True) if i % 2 else (OPENINGS[i // 2 % len(OPENINGS)], False)
            for i in range(n)]


def prompt_ids(tokenizer, n: int, n_tokens: int) -> list[list[int]]:
    """The n sequences' starts (start_texts) as token ids, ready for the model's continuation in
    sequences of n_tokens. A prompt goes through the chat template when the tokenizer has one; an
    opening starts the way the tokenizer starts any text (with BOS only if it adds one), cut to
    leave MIN_ANSWER tokens for the continuation."""
    out = []
    for text, chat in start_texts(n):
        if chat and getattr(tokenizer, "chat_template", None):
            text = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                                 tokenize=False)
            out.append(tokenizer(text, add_special_tokens=False)["input_ids"])
        else:
            out.append(tokenizer(text)["input_ids"][:n_tokens - MIN_ANSWER])
    return out


def generated(build: Build, f16_gguf: Path, n_samples: int, n_tokens: int, seed: int, threads: int,
              on_progress: OnProgress = no_progress, n_held_out: int = 0,
              prompts: list[list[int]] | None = None) -> Calibration:
    """n_samples + n_held_out sequences the model samples itself with llama.cpp (see
    calibration_worker), each from BOS or from its prompt (prompts: one per sequence)."""
    if prompts and max(len(p) for p in prompts) > n_tokens - MIN_ANSWER:
        raise CalibrationError(f"the prompts take up to {max(len(p) for p in prompts)} tokens: --calib-tokens "
                               f"{n_tokens} leaves less than {MIN_ANSWER} for the answers (or pass --no-prompts)")
    with tempfile.TemporaryDirectory(prefix="awq2gguf-calib-") as tmp:
        out = Path(tmp) / "ids.npy"
        cmd = [sys.executable, "-m", "awq2gguf.calibration_worker", str(f16_gguf), str(out),
               str(n_samples + n_held_out), str(n_tokens), str(seed), str(threads)]
        if prompts:
            (Path(tmp) / "prompts.json").write_text(json.dumps(prompts))
            cmd.append(str(Path(tmp) / "prompts.json"))
        stream_tool(cmd, f"sampling calibration text with {build.name} llama.cpp",
                    lambda line: on_progress(int(line.split()[0])),  # "done total" after each decoding step
                    build.env(), CalibrationError)
        ids = np.load(out)
    source = f"generated:seed={seed}" + (f",prompts={min(len(prompts), len(OPENINGS) + len(PROMPTS))}" if prompts else "")
    return Calibration(torch.from_numpy(ids).long(), source, n_held_out)
