"""gRPC port sharing: off for a lone server unless the user turns it on, on for every worker."""

from __future__ import annotations

import pytest

from servinglib.server.cli import parse_flags
from servinglib.server.cli.ports import grpc_channel_arguments
from servinglib.server.grpc import GrpcServerOptions


def effective_reuse(channel_arguments: str, *, share_port: bool) -> object:
    flags = parse_flags(
        ["--model_base_path=/m", f"--grpc_channel_arguments={channel_arguments}"], environ={}
    )
    given = grpc_channel_arguments(flags, share_port=share_port)
    return dict(GrpcServerOptions(channel_arguments=given).grpc_options())["grpc.so_reuseport"]


@pytest.mark.parametrize(
    ("channel_arguments", "share_port", "reuse"),
    [
        ("", False, 0),
        ("grpc.so_reuseport=1", False, 1),
        ("grpc.keepalive_time_ms=1000", False, 0),
        ("", True, 1),
        ("grpc.so_reuseport=0", True, 1),
    ],
)
def test_port_reuse(channel_arguments: str, share_port: bool, reuse: int) -> None:
    """The server reaches gRPC with reuse off by default, the user's choice alone, on in workers."""
    assert effective_reuse(channel_arguments, share_port=share_port) == reuse
