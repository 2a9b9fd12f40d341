"""awq2gguf-serve as a child process on a free loopback port (for `bench serve` and the tests), and
the free port every server child takes (llama-server behind awq2gguf-serve too)."""

from __future__ import annotations

import socket
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, NamedTuple

from ..errors import Awq2ggufError
from ..processes import LOOPBACK, spawned, wait_until_ready


class ServeFailed(Awq2ggufError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


# The model name served()'s clients ask for: the server also answers to the file's stem, and 404s any other.
CLIENT_ALIAS = "served"


class Served(NamedTuple):
    url: str  # http://LOOPBACK:PORT
    process: subprocess.Popen
    output: Callable[[], str]  # what the server has printed so far


@contextmanager
def served(model: Path, build: str, threads: int, *args: str, api_key: str | None = None, timeout: float = 180):
    """Yields the server once it answers (to the name CLIENT_ALIAS too); stops it on exit."""
    port = free_port()
    cmd = [sys.executable, "-m", "awq2gguf.serve", str(model), "--port", str(port), "--build", build,
           "-t", str(threads), "--alias", CLIENT_ALIAS, *(["--api-key", api_key] if api_key else []), *args]
    url = f"http://{LOOPBACK}:{port}"
    with spawned(cmd) as child:
        wait_until_ready(child, f"awq2gguf-serve ({build} build)", timeout, ServeFailed, url=f"{url}/v1/models",
                         headers={"Authorization": f"Bearer {api_key}"} if api_key else {})
        yield Served(url, child.process, child.output)
