"""What every command shares when it runs a tool or writes a file: the one error base class, the
click command classes that turn it into a one-line message, a tool run (to completion, or line by
line as it prints) that fails with the tail of what the tool said, and outputs that appear only
when complete."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import click

# Lines of a failed tool's output quoted in its error: enough for llama.cpp's last log lines and a
# Python traceback's end.
TAIL_LINES = 12


class Awq2ggufError(Exception):
    """A failure the user can act on, with a message that says what and why; the command lines print
    it without a traceback and exit 1."""


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


class ToolFailed(Awq2ggufError):
    pass


def tail(text: str, lines: int = TAIL_LINES) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def tool_failure(what: str, returncode: int, output: str,
                 error: type[Awq2ggufError] = ToolFailed) -> Awq2ggufError:
    """The one message of a failed tool: what failed, its exit code and the tail of its output."""
    return error(f"{what} failed ({returncode}):\n{tail(output)}")


def run_tool(cmd: list[str], what: str, env: dict[str, str] | None = None,
             error: type[Awq2ggufError] = ToolFailed) -> subprocess.CompletedProcess:
    """Run cmd to completion; if it fails, raise `error` naming `what` with the tail of its output
    (stdout then stderr: llama.cpp's tools log errors to either)."""
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, errors="replace")
    if proc.returncode != 0:
        raise tool_failure(what, proc.returncode, proc.stdout + "\n" + proc.stderr, error)
    return proc


def stream_tool(cmd: list[str], what: str, on_line: Callable[[str], None], env: dict[str, str] | None = None,
                error: type[Awq2ggufError] = ToolFailed, timeout: float | None = None) -> None:
    """Run cmd, handing each line it prints on stdout to on_line as it comes (progress, results);
    its stderr is kept for the error. If on_line raises (Ctrl-C too) the tool is killed; if the
    tool fails or runs past `timeout` seconds, raise `error` naming `what` with the tail of stderr."""
    with tempfile.TemporaryFile("w+", errors="replace") as err, subprocess.Popen(
            cmd, env=env, stdout=subprocess.PIPE, stderr=err, text=True, errors="replace") as proc:
        expired = threading.Event()

        def expire():
            expired.set()
            proc.kill()
        timer = threading.Timer(timeout, expire) if timeout else None
        if timer:
            timer.start()
        try:
            for line in proc.stdout:
                on_line(line)
        except BaseException:
            proc.kill()
            raise
        finally:
            if timer:
                timer.cancel()
        proc.wait()
        err.seek(0)
        if expired.is_set():
            raise error(f"{what} ran past {timeout:.0f} s and was stopped:\n{tail(err.read())}")
        if proc.returncode != 0:
            raise tool_failure(what, proc.returncode, err.read(), error)


@contextmanager
def atomic_path(dst: Path) -> Iterator[Path]:
    """A temporary path beside dst, for a file or a folder, that replaces dst only when the block
    completes: an error or Ctrl-C leaves neither a partial dst nor the temporary behind."""
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + ".tmp")
    _remove(tmp)
    try:
        yield tmp
        if tmp.is_dir():
            _remove(dst)
        os.replace(tmp, dst)
    finally:
        _remove(tmp)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
