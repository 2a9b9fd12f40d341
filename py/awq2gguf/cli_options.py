"""Command-line options that awq2gguf, awq2gguf-serve and bench all take, declared once."""

from __future__ import annotations

from enum import Enum

import click

from .builds import BUILD_NAMES
from .options import default, minimum
from .rpc import parse_servers


def comma_ints(value: str | None, what: str = "integers") -> tuple[int, ...]:
    """A comma-separated list of integers (none for "" or None), or click's usage error naming `what`."""
    if not value:
        return ()
    try:
        return tuple(int(v) for v in value.split(","))
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a comma-separated list of {what}") from None


def options(*decorators):
    """Several click options as one decorator, the first on top of --help."""
    def apply(f):
        for option in reversed(decorators):
            f = option(f)
        return f
    return apply


def field_option(name: str, *flags: str, dest: str | None = None, **settings):
    """The click option of Options field `name` (passed to the command as `dest`, else `name`), its
    default and least value taken from Options; `settings` as click.option's (a range's base type
    float or int)."""
    value = default(name)
    settings.setdefault("default", value.value if isinstance(value, Enum) else value)  # click shows an enum's name
    if (least := minimum(name)) is not None:
        low, above = least
        in_range = click.FloatRange if settings.pop("type", int) is float else click.IntRange
        settings["type"] = in_range(min=low, min_open=above)
    settings.setdefault("show_default", True)
    return click.option(*flags, dest or name, **settings)


THREADS = field_option("threads", "--threads", "-t", show_default="physical cores",
                       help="CPU threads for the work (every run's, in bench).")


def build_option(help: str, dest: str = "build_name", choices: tuple[str, ...] = BUILD_NAMES):
    """--build: the llama.cpp build a command works with (by default awq2gguf's); `help` says what
    the command does with it."""
    return field_option("build", "--build", dest=dest, type=click.Choice(choices), help=help)


def _rpc_servers(_ctx, _param, value: str | None) -> tuple[str, ...]:
    try:
        return parse_servers(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None


RPC = click.option("--rpc", metavar="HOST:PORT[,...]", callback=_rpc_servers,
                   help="Split the model's layers over these ggml-rpc-servers (run `build/<build>/bin/ggml-rpc-server "
                        "-H ADDRESS -p PORT` on each machine); this machine keeps the rest.")
