"""The server owns its ports: both are checked before any model loads, and gRPC shares none."""

from __future__ import annotations

import errno
import socket
from typing import Any

from servinglib.errors import UnavailableError
from servinglib.server.cli.flags import ServerFlags

# gRPC's default, SO_REUSEPORT, lets a second server bind the same port and take half of
# the new connections; off, that second server fails to start instead.
_PORT_REUSE = "grpc.so_reuseport"


def check_ports(flags: ServerFlags) -> None:
    """Raises UnavailableError naming the port and its server if a TCP port is not free.

    Called before the models load, so a port in use fails the start at
    once instead of after minutes of loading.  Each port is bound for a
    moment as the server will bind it (TIME_WAIT addresses reused, the
    port shared with no one), never listened on.
    """
    wanted = (
        ("gRPC", "--port", flags.grpc_host, flags.port),
        ("REST", "--rest_api_port", flags.rest_api_host, flags.rest_api_port),
    )
    for server, flag, host, port in wanted:
        if port:
            _check_port(server, flag, host, port)


def grpc_channel_arguments(
    flags: ServerFlags, *, share_port: bool = False
) -> tuple[tuple[str, Any], ...]:
    """``--grpc_channel_arguments`` after gRPC's port sharing, off unless they set it.

    A later pair overrides an earlier one (``GrpcServerOptions.grpc_options``),
    so a ``grpc.so_reuseport`` the user gives wins.  ``share_port``: on, whatever
    they gave (a worker of ``--num_workers``, sharing it with the others).
    """
    from servinglib.server.grpc import parse_channel_arguments  # imports grpc

    given = parse_channel_arguments(flags.grpc_channel_arguments)
    if share_port:
        return (*given, (_PORT_REUSE, 1))
    return ((_PORT_REUSE, 0), *given)


def _check_port(server: str, flag: str, host: str, port: int) -> None:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            problem = "in use" if error.errno == errno.EADDRINUSE else f"not free: {error}"
            raise UnavailableError(
                f"{server} port {port} ({flag}) on {host} is {problem}"
            ) from None
