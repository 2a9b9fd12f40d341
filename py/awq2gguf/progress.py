"""How long work says where it is. Every stage takes one callback, on_progress(done, note=None):
how many of the stage's units are done so far, and optionally a note on the latest (e.g. a
loss); the caller knows the total. The pipeline reports through a Progress, whose stages yield
such callbacks; RichProgress draws them (awq2gguf's stages, bench's runs)."""

from __future__ import annotations

import itertools
import time
from contextlib import contextmanager
from typing import Callable, ContextManager, Iterator, Protocol

import rich.progress


class OnProgress(Protocol):
    def __call__(self, done: int, note: str | None = None) -> None: ...


def no_progress(done: int, note: str | None = None) -> None:
    pass


class Progress(Protocol):
    def stage(self, description: str, total: int | None = None) -> ContextManager[OnProgress]:
        """A stage of the job, of `total` units if it counts them."""

    def note(self, text: str) -> None:
        """A choice the job made, said once."""


class NoProgress:
    @contextmanager
    def stage(self, description, total=None):
        yield no_progress

    def note(self, text):
        pass


class RichProgress:
    """Progress drawn on a rich.progress.Progress: a live bar for stages that count units; with
    `say_done`, one line per finished stage with its time."""

    def __init__(self, progress: rich.progress.Progress, say_done: bool = True):
        self.progress, self.say_done = progress, say_done

    @contextmanager
    def stage(self, description: str, total: int | None = None) -> Iterator[OnProgress]:
        task = self.progress.add_task(description, total=total)
        started = time.perf_counter()

        def update(done: int, note: str | None = None) -> None:
            self.progress.update(task, completed=done, **({"description": f"{description}: {note}"} if note else {}))

        yield update
        self.progress.remove_task(task)
        if self.say_done:
            self.note(f"[green]done[/] {description} [dim]({time.perf_counter() - started:.1f} s)[/]")

    def note(self, text: str) -> None:
        self.progress.console.print(text)


def ticks(on_progress: OnProgress) -> Callable[[], None]:
    """For work counted one unit at a time over several calls (bench's runs): each call is one more done."""
    done = itertools.count(1)
    return lambda: on_progress(next(done))
