"""The order in which A/B benchmarks run what they compare."""

from __future__ import annotations

from typing import Iterator, Sequence, TypeVar

T = TypeVar("T")


def abba(variants: Sequence[T], reps: int) -> Iterator[Sequence[T]]:
    """Each repetition's order of the variants: as given, then reversed, and so on (A B, B A, A B, ...),
    so slow drifts of the machine (thermal, background work) fall on every variant alike."""
    for rep in range(reps):
        yield variants if rep % 2 == 0 else variants[::-1]
