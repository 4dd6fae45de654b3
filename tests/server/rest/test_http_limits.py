"""HTTP limits over real sockets: idle and slow connections reaped, header cap, connection cap."""

from __future__ import annotations

import gc
import gzip
import os
import select
import socket
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack, contextmanager

import httpx
import pytest

from servinglib.server.rest import HttpLimits, RestApp, RestServer
from servinglib.server.rest._connection import HttpConnection
from servinglib.testing import wait_until

# Generous for a loaded machine: each wait ends as soon as its condition holds.
WAIT_S = 30.0


@contextmanager
def serving(app: Callable[..., Awaitable[None]], **limits: float) -> Iterator[RestServer]:
    """``app`` (an ASGI app: the session's RestApp, say) on a free port with these HttpLimits
    fields."""
    server = RestServer(app, "127.0.0.1", 0, limits=HttpLimits(**limits))  # type: ignore[arg-type]
    server.start()
    try:
        yield server
    finally:
        server.stop()


def connect(server: RestServer) -> socket.socket:
    """A raw client socket to the server."""
    return socket.create_connection(("127.0.0.1", server.port), timeout=WAIT_S)


def read_until_closed(client: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection (within WAIT_S)."""
    chunks = []
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        try:
            chunk = client.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    else:
        raise AssertionError("the server kept the connection open")
    return b"".join(chunks)


def live_request(server: RestServer) -> httpx.Response:
    return httpx.get(f"{server.url}/v2/health/live", timeout=WAIT_S)


def test_a_connection_that_never_sends_is_closed_after_the_idle_timeout(app: RestApp) -> None:
    """A client that connects and sends nothing is disconnected once idle_timeout_s passes."""
    with serving(app, idle_timeout_s=0.5) as server, connect(server) as client:
        started = time.monotonic()
        assert read_until_closed(client) == b""
        assert time.monotonic() - started >= 0.4


def test_a_keep_alive_connection_is_closed_after_the_idle_timeout(app: RestApp) -> None:
    """After a response, a connection left idle is closed once idle_timeout_s passes."""
    with serving(app, idle_timeout_s=0.5) as server, connect(server) as client:
        client.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: t\r\n\r\n")
        answer = read_until_closed(client)
        assert answer.startswith(b"HTTP/1.1 200")


def test_headers_sent_too_slowly_are_cut_with_408(app: RestApp) -> None:
    """A slowloris client dripping header bytes gets 408 once request_read_timeout_s passes."""
    with serving(app, request_read_timeout_s=1.0, idle_timeout_s=0.5) as server:
        with connect(server) as client:
            client.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: t\r\n")
            stop = threading.Event()

            def drip() -> None:  # each byte arrives well within the idle timeout
                while not stop.wait(0.1):
                    try:
                        client.sendall(b"X-Slow: 1\r\n")
                    except OSError:
                        return

            dripper = threading.Thread(target=drip)
            dripper.start()
            try:
                answer = read_until_closed(client)
            finally:
                stop.set()
                dripper.join()
        assert answer.startswith(b"HTTP/1.1 408"), answer[:100]
        assert live_request(server).status_code == 200


def test_a_body_sent_too_slowly_is_cut(app: RestApp) -> None:
    """A request whose body stops arriving is answered 408 when request_read_timeout_s passes."""
    with serving(app, request_read_timeout_s=1.0) as server, connect(server) as client:
        client.sendall(
            b"POST /v1/models/toy:predict HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n{"
        )
        answer = read_until_closed(client)
        assert answer.startswith(b"HTTP/1.1 408"), answer[:100]


def test_headers_over_the_cap_are_431_and_under_it_served(app: RestApp) -> None:
    """Headers past max_header_bytes get a JSON 431; a request just under the cap is served."""
    with serving(app, max_header_bytes=8192) as server:
        ok = httpx.get(
            f"{server.url}/v2/health/live", headers={"X-Pad": "a" * 6000}, timeout=WAIT_S
        )
        assert ok.status_code == 200
        over = httpx.get(
            f"{server.url}/v2/health/live", headers={"X-Pad": "a" * 8200}, timeout=WAIT_S
        )
        assert over.status_code == 431  # arrived in one read: measured when the headers end
        assert over.json() == {"error": "The request line and headers exceed 8192 bytes"}
        with connect(server) as client:
            client.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: t\r\nX-Pad: ")
            client.sendall(b"a" * (1 << 20))
            answer = read_until_closed(client)
        assert answer.startswith(b"HTTP/1.1 431"), answer[:100]
        assert b'{"error": "The request line and headers exceed 8192 bytes"}' in answer


def test_pipelined_requests_after_a_large_body_are_not_refused(app: RestApp) -> None:
    """A read ending one request's large body and starting the next is no false 431."""
    body = b'{"instances": [' + b"1.0, " * 20000 + b"1.0]}"
    request = (
        b"POST /v1/models/py_half_plus_two:predict HTTP/1.1\r\nHost: t\r\n"
        b"Content-Length: %d\r\n\r\n" % len(body) + body
    )
    with serving(app, max_header_bytes=1024) as server, connect(server) as client:
        client.sendall(
            request + b"GET /v2/health/live HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
        )
        answer = read_until_closed(client)
    assert answer.count(b"HTTP/1.1 200") == 2, answer[:200]


def test_a_new_connection_past_the_cap_closes_the_longest_idle_one(app: RestApp) -> None:
    """At max_connections, a new client is served and the connection idle longest is closed,
    in the order they went idle even when that was within one millisecond (uvloop's clock)."""
    live = b"GET /v2/health/live HTTP/1.1\r\nHost: t\r\n\r\n"
    with serving(app, max_connections=3, idle_timeout_s=WAIT_S) as server, ExitStack() as stack:
        idle = []
        for _ in range(3):
            client = stack.enter_context(connect(server))
            client.sendall(live)
            assert client.recv(65536).startswith(b"HTTP/1.1 200")  # now idle, in keep-alive
            idle.append(client)
        for _ in range(4):  # each newcomer closes the one idle longest, then goes idle itself
            newcomer = stack.enter_context(connect(server))
            newcomer.sendall(live)
            assert newcomer.recv(65536).startswith(b"HTTP/1.1 200")
            assert read_until_closed(idle.pop(0)) == b""
            idle.append(newcomer)
        idle[0].sendall(live)
        assert idle[0].recv(65536).startswith(b"HTTP/1.1 200")
        assert live_request(server).status_code == 200  # closes idle[1] now


def test_past_the_cap_with_every_connection_busy_a_new_one_gets_503(app: RestApp) -> None:
    """With every connection inside a request, a new connection is answered 503 and closed."""
    unfinished = (  # a request whose body has not all arrived: busy, not idle
        b"POST /v1/models/py_half_plus_two:predict HTTP/1.1\r\nHost: t\r\n"
        b"Content-Length: 100\r\n\r\n{"
    )
    with serving(app, max_connections=2) as server, ExitStack() as stack:
        for _ in range(2):
            stack.enter_context(connect(server)).sendall(unfinished)
        wait_until(lambda: _open_connections(server) == 2, WAIT_S)
        with connect(server) as client:
            answer = read_until_closed(client)
        assert answer.startswith(b"HTTP/1.1 503"), answer[:100]
        assert b"retry later" in answer


def _open_connections(server: RestServer) -> int:
    return len(server._server.server_state.connections)  # uvicorn's count


@pytest.mark.parametrize("field", ["max_header_bytes", "idle_timeout_s", "max_connections"])
def test_limits_must_be_positive(field: str) -> None:
    """A limit of 0 is refused when the limits are made."""
    with pytest.raises(ValueError, match=field):
        HttpLimits(**{field: 0})


def test_a_gzip_body_over_a_real_socket_is_answered(app: RestApp) -> None:
    """curl --compressed's way: a gzip request body over a socket is decoded and answered."""
    body = gzip.compress(
        b'{"inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "data": [1, 2]}]}'
    )
    with serving(app) as server:
        response = httpx.post(
            f"{server.url}/v2/models/half_plus_two/infer",
            content=body,
            headers={"content-encoding": "gzip", "content-type": "application/json"},
            timeout=WAIT_S,
        )
    assert response.status_code == 200, response.text
    assert response.json()["outputs"][0]["data"] == [3.5, 4.0]


LIVE = b"GET /v2/health/live HTTP/1.1\r\nHost: t\r\n\r\n"


def _send_until_the_server_stops_reading(client: socket.socket) -> int:
    """Pipelines LIVE requests, never reading, until nothing more is taken for 1 s; bytes sent."""
    client.setblocking(False)
    chunk = LIVE * 1000
    sent = 0
    while True:
        try:
            sent += client.send(chunk)
        except BlockingIOError:
            _, writable, _ = select.select([], [client], [], 1.0)
            if not writable:
                return sent


def _connection(server: RestServer) -> HttpConnection:
    """The server's one connection."""
    (connection,) = server._server.server_state.connections
    assert isinstance(connection, HttpConnection)
    return connection


def test_pipelined_requests_whose_answers_are_not_read_are_not_buffered(app: RestApp) -> None:
    """A client pipelining requests without reading makes the server stop reading, not buffer."""
    with serving(app) as server:
        with connect(server) as client:
            sent = _send_until_the_server_stops_reading(client)
            connection = _connection(server)
            assert sent > 1 << 20  # the kernel's buffers take that much
            assert connection.queued_requests <= 4 + 4096 // len(LIVE)
            assert connection.unparsed_bytes <= 256 << 10
            assert live_request(server).status_code == 200  # others are answered meanwhile
            closed = weakref.ref(connection)
            del connection
        wait_until(lambda: not server._server.server_state.connections, WAIT_S)

        def released() -> bool:
            gc.collect()
            return closed() is None

        wait_until(released, WAIT_S)


def test_pipelined_requests_are_all_answered_as_the_client_reads(app: RestApp) -> None:
    """20,000 pipelined requests sent at once get 20,000 answers, in order, as they are read."""
    count = 20_000
    with serving(app) as server, connect(server) as client:
        sender = threading.Thread(target=client.sendall, args=(LIVE * count,))
        sender.start()
        received = bytearray()
        while received.count(b"HTTP/1.1 200") < count:
            chunk = client.recv(1 << 20)
            assert chunk, "the server closed the connection"
            received += chunk
        sender.join(WAIT_S)
    assert received.count(b"HTTP/1.1 ") == count


def _reading_headers(server: RestServer) -> int:
    connections = server._server.server_state.connections
    return sum(connection.reading_headers for connection in connections)


def _answered(client: socket.socket) -> bool:
    readable, _, _ = select.select([client], [], [], 0)
    return bool(readable)


def test_clients_whose_headers_never_end_leave_room_for_a_new_client(app: RestApp) -> None:
    """With max_connections=8, 20 clients stuck in their headers: 4 kept, a new client served."""
    with serving(app, max_connections=8) as server, ExitStack() as stack:
        slow = []
        for _ in range(20):
            client = stack.enter_context(connect(server))
            client.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: t\r\n")
            slow.append(client)
        # Each is either refused or read by the server, which holds half its cap in headers.
        wait_until(
            lambda: sum(map(_answered, slow)) + _reading_headers(server) == len(slow), WAIT_S
        )
        assert _reading_headers(server) == 4
        assert not any(map(_answered, slow[-4:]))  # the 4 newest still wait
        assert read_until_closed(slow[0]).startswith(b"HTTP/1.1 408")  # the oldest went first
        assert live_request(server).status_code == 200  # its headers took the earliest's place
        assert [_answered(client) for client in slow[-4:]] == [True, False, False, False]


def _open_files() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_refused_connections_linger_open_32_at_most(app: RestApp) -> None:
    """60 clients refused within the 2 s linger: the server keeps 32 of them open, not 60."""
    with serving(app, max_connections=2) as server, ExitStack() as stack:
        before = _open_files()
        clients = []
        for _ in range(61):  # each one's headers close the previous one's (half of 2 may read)
            client = stack.enter_context(connect(server))
            client.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: t\r\n")
            clients.append(client)
        wait_until(lambda: all(map(_answered, clients[:-1])), WAIT_S)
        server_side = _open_files() - before - len(clients)
        # 32 lingering, the open one, and a few the rest of the process (a source's poll, a log
        # file) may hold meanwhile: far from the 60 every refused connection held before.
        assert server_side <= 32 + 1 + 4, server_side
