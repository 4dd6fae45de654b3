"""servinglib-server's REST limits against a real process: many idle connections, huge headers."""

from __future__ import annotations

import resource
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from servinglib.testing import wait_until
from tests.server.cli.test_model_server import Server
from tests.server.cli.test_request_bombs import peak_rss_bytes, triple_server

FD_LIMIT = 1024
IDLE_CONNECTIONS = 1100


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    def lower_fd_limit(started: Server) -> None:  # while it imports, before it opens sockets
        resource.prlimit(started.process.pid, resource.RLIMIT_NOFILE, (FD_LIMIT, FD_LIMIT))

    # The idle connections must outlive the test.
    with triple_server(
        tmp_path, "--rest_api_idle_timeout_seconds=600", on_start=lower_fd_limit
    ) as running:
        yield running


def test_1100_idle_connections_do_not_stop_new_ones_being_served(server: Server) -> None:
    """With 1,024 files allowed, 1,100 idle connections still leave room for a new request."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if max(soft, hard) < IDLE_CONNECTIONS + 100:
        pytest.skip(f"this test process may open only {max(soft, hard)} files")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, IDLE_CONNECTIONS + 100), hard))
    try:
        with ExitStack() as stack:
            for _ in range(IDLE_CONNECTIONS):
                stack.enter_context(socket.create_connection(("127.0.0.1", server.rest_port)))
            for _ in range(3):  # each on a new connection (server.http would reuse its own)
                response = httpx.post(
                    f"http://127.0.0.1:{server.rest_port}/v1/models/triple:predict",
                    json={"instances": [1.0]},
                    timeout=30,
                )
                assert response.status_code == 200, response.text
                assert response.json() == {"predictions": [3.0]}
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert server.process.poll() is None


def test_a_200_mib_header_costs_the_server_no_memory(server: Server) -> None:
    """Headers of 200 MiB are refused with 431 after 64 KiB, the peak RSS barely moving."""
    assert server.predict("triple", [1.0]).status_code == 200
    before = peak_rss_bytes(server.process.pid)
    with socket.create_connection(("127.0.0.1", server.rest_port), timeout=30) as client:
        client.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: t\r\nX-Big: ")
        chunk = b"a" * (1 << 20)
        try:
            for _ in range(200):
                client.sendall(chunk)
        except OSError:
            pass  # the server closed the connection after its answer: enough was sent
        answer = client.recv(65536)
    assert answer.startswith(b"HTTP/1.1 431"), answer[:100]
    growth = peak_rss_bytes(server.process.pid) - before
    assert growth < 16 << 20, f"peak RSS grew by {growth >> 20} MiB"
    wait_until(lambda: _live(server), 30)


def _live(server: Server) -> bool:
    try:
        return server.http.get("/v2/health/live").status_code == 200
    except httpx.HTTPError:
        return False


def test_limit_flags_must_be_positive() -> None:
    """--rest_api_max_connections=0 stops the start with one line naming the flag."""
    done = subprocess.run(
        [sys.executable, "-m", "servinglib", "--demo", "--rest_api_max_connections=0"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0
    assert "--rest_api_max_connections must be positive" in done.stderr
