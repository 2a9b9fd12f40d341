"""The click command classes of the three command lines: the toolkit's errors printed as one line
without a traceback, and SIGTERM handled as Ctrl-C is."""

from __future__ import annotations

import signal
import threading

import click

from .errors import Awq2ggufError


def _terminated(signum: int, frame) -> None:
    raise SystemExit(128 + signum)


class _UserErrors:
    """Awq2ggufError raised while the command runs ends it with its message (click's "Error: ...",
    exit 1), without a traceback. SIGTERM ends it as Ctrl-C does, through every `finally` (so no work
    folder or half-written file stays behind), with exit status 143."""

    def invoke(self, ctx: click.Context):
        in_main_thread = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGTERM, _terminated) if in_main_thread else None
        try:
            return super().invoke(ctx)
        except Awq2ggufError as e:
            raise click.ClickException(str(e)) from None
        except RuntimeError as e:
            # SIGTERM's SystemExit raised while a class is made (an import under way) comes out wrapped
            # by Python (< 3.12) as "Error calling __set_name__": it is still the stop.
            if isinstance(e.__cause__, SystemExit):
                raise e.__cause__ from None
            raise
        finally:
            if in_main_thread:
                signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


class Command(_UserErrors, click.Command):
    pass


class Group(_UserErrors, click.Group):
    """Its subcommands' errors too: they run inside the group's invoke."""
