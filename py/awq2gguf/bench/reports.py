"""What every bench command saves and prints: a typed report per kind, saved as JSON under
bench/results/raw/ and rendered as a table. Each command module defines its report type (its
fields, the type of its rows and its table) and registers it under the kinds it saves, so `bench
report` can load any saved file back into its type; the rows and reports several commands share
are here."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Callable, ClassVar

from .tables import Table

REPORT_TYPES: dict[str, type[Report]] = {}


def report_kinds(*kinds: str) -> Callable[[type[Report]], type[Report]]:
    """Register a report type as the one saved under these kinds."""
    def register(cls: type[Report]) -> type[Report]:
        for kind in kinds:
            REPORT_TYPES[kind] = cls
        return cls
    return register


@dataclass(kw_only=True)
class QualityRow:
    """A model file's size and its scores on a text: perplexity, and against a base's logits the
    mean KLD (nats/token) and how often its top token is the base's (%)."""
    size_mib: float
    ppl: float
    ppl_err: float
    kld: float | None = None
    kld_err: float | None = None
    same_top_p: float | None = None
    same_top_p_err: float | None = None


@dataclass(kw_only=True)
class MadeRow(QualityRow):
    """A file some method made: its scores and what making it took (none where it was not timed)."""
    make_s: float | None = None
    peak_rss_mib: float | None = None


@dataclass(kw_only=True)
class Report:
    kind: str
    busy_warning: str | None = None  # the machine was busy when the command started
    host: str | None = None          # the CPU it ran on (reports saved before hosts were recorded have none)
    ROWS: ClassVar[dict[str, type]] = {}  # its lists of rows by field name, and each one's row type

    def __post_init__(self):
        """Rows made as dicts (by the command, or read back from JSON) become their row type: a field
        that is missing or unknown fails here."""
        for name, row in self.ROWS.items():
            setattr(self, name, [r if isinstance(r, row) else row(**r) for r in getattr(self, name)])

    def table(self) -> Table:
        raise NotImplementedError

    def titled_table(self) -> Table:
        """The table with the CPU it was measured on in its title."""
        table = self.table()
        return Table(f"{table.title} [{self.host}]", table.headers, table.rows) if self.host else table

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(kw_only=True)
class TextReport(Report):
    """Scores on a text: the build whose llama-perplexity measured them, over `chunks` windows of `ctx` tokens."""
    build: str
    text: str
    ctx: int
    chunks: int


def from_json(data: dict) -> Report:
    return REPORT_TYPES[data["kind"]](**data)
