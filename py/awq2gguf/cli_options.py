"""Command-line options that awq2gguf, awq2gguf-serve and bench all take, declared once."""

from __future__ import annotations

import click

from .host import physical_cores

def comma_ints(value: str | None, what: str = "integers") -> tuple[int, ...]:
    """A comma-separated list of integers (none for "" or None), or click's usage error naming `what`."""
    if not value:
        return ()
    try:
        return tuple(int(v) for v in value.split(","))
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a comma-separated list of {what}") from None


THREADS = click.option("--threads", "-t", type=click.IntRange(min=1), default=physical_cores,
                       show_default="physical cores", help="CPU threads for the work (every run's, in bench).")
