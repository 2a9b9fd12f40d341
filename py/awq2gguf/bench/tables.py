"""Tables of bench reports (each report type builds its own), rendered for the terminal (rich) or Markdown."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table as RichTable


@dataclass
class Table:
    title: str
    headers: list[str]
    rows: list[list[str]]


def optional(value: float | None, fmt: str) -> str:
    """A number, or "-" where there is none."""
    return "-" if value is None else format(value, fmt)


def median_range(values: list[float]) -> dict:
    """The spread `spread` shows: median, min and max."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def spread(d: dict, fmt: str) -> str:
    """A median with its min-max range."""
    return f"{d['median']:{fmt}} ({d['min']:{fmt}}-{d['max']:{fmt}})"


def print_rich(table: Table) -> None:
    out = Console()
    if not out.is_terminal:
        out.width = 160  # keep tables whole when piped or captured
    t = RichTable(title=table.title)
    for i, h in enumerate(table.headers):
        t.add_column(h, justify="left" if i < 2 else "right")
    for row in table.rows:
        t.add_row(*row)
    out.print(t)


def markdown(table: Table) -> str:
    lines = [f"**{table.title}**", "", "| " + " | ".join(table.headers) + " |",
             "| " + " | ".join("---" for _ in table.headers) + " |"]
    lines += ["| " + " | ".join(row) + " |" for row in table.rows]
    return "\n".join(lines) + "\n"
