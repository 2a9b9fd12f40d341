"""Every child process the toolkit starts: a tool run to completion or line by line, failing with the
tail of what it said; and a server started as a child, waited on until it answers, and stopped."""

from __future__ import annotations

import collections
import ctypes
import http.client
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from contextlib import contextmanager, nullcontext
from typing import IO, Callable, Iterator, NamedTuple

from .errors import Awq2ggufError, ToolFailed, tail, tool_failure

# prctl(2)'s option that has the kernel signal a child when the thread that started it exits.
PR_SET_PDEATHSIG = 1
# The address the toolkit's own servers listen on, and awq2gguf-serve's default.
LOOPBACK = "127.0.0.1"


def run(cmd: list[str], env: dict[str, str] | None = None, timeout: float | None = None) -> subprocess.CompletedProcess:
    """Run cmd to completion, its stdout and stderr captured as text (undecodable bytes replaced);
    subprocess.TimeoutExpired, the child killed, past `timeout` seconds."""
    return subprocess.run(cmd, env=env, capture_output=True, text=True, errors="replace", timeout=timeout)


def run_tool(cmd: list[str], what: str, env: dict[str, str] | None = None,
             error: type[Awq2ggufError] = ToolFailed) -> subprocess.CompletedProcess:
    """Run cmd to completion; if it fails, raise `error` naming `what` with the tail of its output
    (stdout then stderr: llama.cpp's tools log errors to either)."""
    proc = run(cmd, env)
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


class Child(NamedTuple):
    process: subprocess.Popen
    output: Callable[[], str]  # what it has printed so far, stdout and stderr together


@contextmanager
def spawned(cmd: list[str], env: dict[str, str] | None = None, stdin: int | None = None,
            keep_lines: int | None = None, die_with_parent: bool = False, own_group: bool = False,
            grace: float = 30) -> Iterator[Child]:
    """cmd started, stopped on exit (SIGTERM, then SIGKILL after `grace` seconds; at once if 0).
    Its output is kept whole in a temporary file (keep_lines None: a pipe nobody read would fill and
    stop it), as its last `keep_lines` lines (a long-running child's log would grow without end), or
    not at all (0). die_with_parent: killed when the thread that started it ends, even by SIGKILL;
    own_group: in its own process group, so a terminal's Ctrl-C does not reach it."""
    with tempfile.TemporaryFile("w+", errors="replace") if keep_lines is None else nullcontext() as log:
        stdout = log if log is not None else subprocess.PIPE if keep_lines else subprocess.DEVNULL
        proc = subprocess.Popen(cmd, env=env, stdin=stdin, stdout=stdout, stderr=subprocess.STDOUT, text=True,
                                errors="replace", preexec_fn=_before_exec(die_with_parent, own_group))
        try:
            output = _whole(log) if log is not None else _last_lines(proc, keep_lines) if keep_lines else lambda: ""
            yield Child(proc, output)
        finally:
            _stop(proc, grace)


def _before_exec(die_with_parent: bool, own_group: bool) -> Callable[[], None] | None:
    if not (die_with_parent or own_group):
        return None

    def in_child():
        if own_group:
            os.setpgid(0, 0)
        if die_with_parent:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    return in_child


def _whole(log: IO[str]) -> Callable[[], str]:
    def output() -> str:
        log.seek(0)
        return log.read()
    return output


def _last_lines(proc: subprocess.Popen, lines: int) -> Callable[[], str]:
    kept = collections.deque(maxlen=lines)
    reader = threading.Thread(target=lambda: kept.extend(proc.stdout), daemon=True)
    reader.start()

    def output() -> str:
        reader.join(5 if proc.poll() is not None else 0)  # all of it once the child has exited
        return "".join(kept)
    return output


def _stop(proc: subprocess.Popen, grace: float) -> None:
    if grace:
        proc.terminate()
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            pass
    proc.kill()
    proc.wait()


def wait_until_ready(child: Child, what: str, timeout: float, error: type[Awq2ggufError] = ToolFailed, *,
                     url: str | None = None, headers: dict[str, str] | None = None, port: int | None = None) -> None:
    """Returns once url answers 200 (or, without one, `port` on loopback takes a connection); `error`
    with the tail of the child's output if it exits first, or saying it did not answer within timeout
    seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if child.process.poll() is not None:
            raise tool_failure(what, child.process.returncode, child.output(), error)
        if _answers(url, headers or {}) if url else _takes_connections(port):
            return
        if time.monotonic() > deadline:
            raise error(f"{what} did not answer within {timeout:.0f} s")
        time.sleep(0.1)


# A child on loopback is asked directly, whatever proxy the environment names.
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _answers(url: str, headers: dict[str, str]) -> bool:
    try:
        with _DIRECT.open(urllib.request.Request(url, headers=headers), timeout=5) as response:
            return response.status == 200
    except urllib.error.HTTPError as e:  # 503 while a server loads its model
        e.close()
        return False
    except (OSError, http.client.HTTPException):  # not listening yet
        return False


def _takes_connections(port: int) -> bool:
    try:
        socket.create_connection((LOOPBACK, port), timeout=1).close()
        return True
    except OSError:
        return False
