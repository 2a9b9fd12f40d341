"""llama.cpp's RPC backend as awq2gguf-serve and bench use it: a model's layers split over
ggml-rpc-servers on other machines, named HOST:PORT."""

from __future__ import annotations

import socket

from .errors import Awq2ggufError


class RpcUnreachable(Awq2ggufError):
    pass


def parse_servers(value: str | None) -> tuple[str, ...]:
    """HOST:PORT[,...] as a tuple; ValueError naming the first that is not HOST:PORT."""
    servers = tuple(v.strip() for v in value.split(",")) if value else ()
    for server in servers:
        host, _, port = server.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"{server!r} is not HOST:PORT")
    return servers


def check_reachable(servers: tuple[str, ...], timeout: float = 5) -> None:
    """RpcUnreachable naming the first server that does not accept a connection (llama.cpp would
    fail with pages of log)."""
    for server in servers:
        host, _, port = server.rpartition(":")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
        except OSError as e:
            raise RpcUnreachable(f"cannot reach the ggml-rpc-server at {server}: {e}") from None
