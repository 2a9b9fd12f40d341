"""Command-line options that awq2gguf, awq2gguf-serve and bench all take, declared once."""

from __future__ import annotations

import click

from .host import physical_cores
from .rpc import parse_servers

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


def _rpc_servers(_ctx, _param, value: str | None) -> tuple[str, ...]:
    try:
        return parse_servers(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None


RPC = click.option("--rpc", metavar="HOST:PORT[,...]", callback=_rpc_servers,
                   help="Split the model's layers over these ggml-rpc-servers (run `build/<build>/bin/ggml-rpc-server "
                        "-H ADDRESS -p PORT` on each machine); this machine keeps the rest.")
