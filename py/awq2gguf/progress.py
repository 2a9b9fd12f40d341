"""How long work says where it is. Every stage takes one callback, on_progress(done, note=None):
how many of the stage's units are done so far, and optionally a note on the latest (e.g. a
loss); the caller knows the total. The pipeline reports through a Progress, whose stages yield
such callbacks (cli.py draws them with rich)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import ContextManager, Protocol


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
