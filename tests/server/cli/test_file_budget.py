"""FileBudget, and servinglib-server at a low open-file limit flooded on its gRPC port."""

from __future__ import annotations

import shutil
import socket
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from servinglib.server.cli.file_budget import FileBudget
from servinglib.testing import wait_until, write_python_model
from tests.server.cli.test_model_server import CONFIG, MODEL_PY, Server, python_model

FD_LIMIT = 256
SILENT_CONNECTIONS = 400


def test_connections_as_wanted_when_the_limit_leaves_room() -> None:
    """With 20,000 files allowed, both front ends get their 1000 and 256 are kept."""
    assert FileBudget.split(20_000, 50, 1000, 1000) == FileBudget(20_000, 1000, 1000, 256)


def test_a_low_limit_is_shared_in_proportion_and_a_reserve_kept() -> None:
    """At 1,024 files, what 50 open and 256 kept leave is split in proportion to the flags."""
    budget = FileBudget.split(1024, 50, 1000, 1000)
    assert budget == FileBudget(1024, 359, 359, 256)
    assert FileBudget.split(1024, 50, 3000, 1000).rest_connections == 538
    assert FileBudget.split(256, 40, 1000, 0) == FileBudget(256, 152, 0, 64)


def test_each_front_end_keeps_one_connection_when_nothing_is_left() -> None:
    """Even with every file already open, each served front end may hold one connection."""
    assert FileBudget.split(64, 64, 1000, 1000) == FileBudget(64, 1, 1, 16)


def _closed(client: socket.socket) -> bool:
    """Whether the server closed ``client`` (what it sent is read; open if quiet for 0.1 s)."""
    client.settimeout(0.1)
    while True:
        try:
            if not client.recv(65536):
                return True
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    python_model(tmp_path, "triple", 3)
    config = tmp_path / "models.config"
    config.write_text(CONFIG % ("triple", tmp_path / "triple"))
    running = Server(
        f"--model_config_file={config}",
        "--allow_python_code_execution",
        "--file_system_poll_wait_seconds=0.2",
        # The silent connections stay for the whole test (the 5 s default is tested with gRPC).
        "--grpc_channel_arguments=grpc.server_handshake_timeout_ms=600000",
        # FD_LIMIT files at most, half of them until the server raises its soft limit.
        launcher=("prlimit", f"--nofile={FD_LIMIT // 2}:{FD_LIMIT}", "--"),
    )
    try:
        running.wait_ready()
        yield running
    finally:
        running.close()


@pytest.mark.skipif(shutil.which("prlimit") is None, reason="needs util-linux's prlimit")
def test_silent_grpc_connections_past_the_file_limit_leave_rest_and_models_working(
    server: Server, tmp_path: Path
) -> None:
    """400 silent gRPC connections at a 256-file hard limit: REST answers, a new version loads.

    A gRPC client connected before them is served too; new ones wait for the handshake timeout.
    """
    assert server.health() == 1  # SERVING; its channel is connected now
    with ExitStack() as stack:
        silent = [
            stack.enter_context(socket.create_connection(("127.0.0.1", server.grpc_port)))
            for _ in range(SILENT_CONNECTIONS)
        ]
        response = server.predict("triple", [1.0])
        assert response.status_code == 200, response.text
        assert server.health() == 1
        write_python_model(tmp_path, "triple", MODEL_PY % 4, version=2)
        wait_until(lambda: server.predict("triple", [1.0]).json() == {"predictions": [4.0]}, 60)
        assert sum(_closed(client) for client in silent) >= SILENT_CONNECTIONS - FD_LIMIT
    assert server.health() == 1
    server.process.terminate()
    output = server.output()
    assert "Too many open files" not in output
    assert f"Open files: {FD_LIMIT} allowed; REST may hold" in output
