"""Servers as child processes on free loopback ports: awq2gguf-serve itself (for `bench serve` and the
tests), and the waiting and stopping every such child needs (llama-server behind awq2gguf-serve too)."""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, NamedTuple

import httpx

from ..proc_io import Awq2ggufError, tool_failure


class ServeFailed(Awq2ggufError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served(NamedTuple):
    url: str  # http://127.0.0.1:PORT
    process: subprocess.Popen
    output: Callable[[], str]  # what the server has printed so far


@contextmanager
def served(model: Path, build: str, threads: int, *args: str, api_key: str | None = None, timeout: float = 180):
    """Yields the server once it answers; stops it on exit."""
    port = free_port()
    cmd = [sys.executable, "-m", "awq2gguf.serve", str(model), "--port", str(port), "--build", build,
           "-t", str(threads), *(["--api-key", api_key] if api_key else []), *args]
    log = tempfile.TemporaryFile("w+", errors="replace")  # a pipe nobody reads would fill and stop the server
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"

    def output() -> str:
        log.seek(0)
        return log.read()

    try:
        wait_until_answering(proc, f"{url}/v1/models", f"awq2gguf-serve ({build} build)", output, ServeFailed, timeout,
                             {"Authorization": f"Bearer {api_key}"} if api_key else {})
        yield Served(url, proc, output)
    finally:
        stop(proc)
        log.close()


def wait_until_answering(proc: subprocess.Popen, url: str, what: str, output: Callable[[], str],
                         error: type[Awq2ggufError], timeout: float, headers: dict[str, str] | None = None) -> None:
    """Returns once url answers 200; `error` with the tail of the child's output if it exits first,
    or if it does not answer within timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            raise tool_failure(what, proc.returncode, output(), error)
        try:
            if httpx.get(url, headers=headers, timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise error(f"{what} did not answer within {timeout:.0f} s")
        time.sleep(0.1)


def stop(proc: subprocess.Popen, grace: float = 30) -> None:
    """SIGTERM, then SIGKILL after `grace` seconds."""
    proc.terminate()
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
