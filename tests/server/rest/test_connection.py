"""The REST server's HTTP/1.1 connections over real sockets: framing, keep-alive, errors."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from servinglib.testing import wait_until
from tests.server.rest.test_http_limits import WAIT_S, connect, read_until_closed, serving

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


async def echo(scope: Scope, receive: Receive, send: Send) -> None:
    """Answers the method, path and body it was sent, with a content-length."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    answer = b"%s %s %s" % (scope["method"].encode(), scope["raw_path"], body)
    headers = [(b"content-type", b"text/plain"), (b"content-length", b"%d" % len(answer))]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": answer})


def read_response(client: socket.socket) -> tuple[bytes, bytes]:
    """One response with a content-length: its head and its body (nothing of the next one)."""
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        byte = client.recv(1)
        assert byte, head
        head += byte
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    body = b""
    while len(body) < length:
        chunk = client.recv(length - len(body))
        assert chunk
        body += chunk
    return head, body


def test_keep_alive_serves_requests_in_order_on_one_connection() -> None:
    """Sequential and pipelined requests on one connection are each answered, in order."""
    with serving(echo) as server, connect(server) as client:
        client.sendall(b"GET /1 HTTP/1.1\r\nHost: t\r\n\r\n")
        assert read_response(client)[1] == b"GET /1 "
        client.sendall(b"GET /2 HTTP/1.1\r\nHost: t\r\n\r\nGET /3 HTTP/1.1\r\nHost: t\r\n\r\n")
        assert read_response(client)[1] == b"GET /2 "
        assert read_response(client)[1] == b"GET /3 "


def test_http_1_0_is_answered_and_closed() -> None:
    """An HTTP/1.0 request without keep-alive gets `connection: close` and the end."""
    with serving(echo) as server, connect(server) as client:
        client.sendall(b"GET /old HTTP/1.0\r\n\r\n")
        answer = read_until_closed(client)
    assert answer.startswith(b"HTTP/1.1 200")
    assert b"\r\nconnection: close\r\n" in answer
    assert answer.endswith(b"GET /old ")


def test_expect_100_continue_is_answered_before_the_body_is_sent() -> None:
    """curl's large uploads wait for `100 Continue`: it comes when the app reads the body."""
    with serving(echo) as server, connect(server) as client:
        client.sendall(
            b"POST /up HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n"
        )
        assert client.recv(65536) == b"HTTP/1.1 100 Continue\r\n\r\n"
        client.sendall(b"data")
        assert read_response(client)[1] == b"POST /up data"


def test_a_head_request_gets_the_headers_and_no_body() -> None:
    """HEAD: the app's content-length is kept, no body is sent, the connection goes on."""
    with serving(echo) as server, connect(server) as client:
        client.sendall(b"HEAD /h HTTP/1.1\r\nHost: t\r\n\r\nGET /next HTTP/1.1\r\nHost: t\r\n\r\n")
        received = b""
        while received.count(b"HTTP/1.1 200") < 2 or not received.endswith(b"GET /next "):
            chunk = client.recv(65536)
            assert chunk
            received += chunk
    head, rest = received.split(b"\r\n\r\n", 1)
    assert b"content-length: 8" in head
    assert rest.startswith(b"HTTP/1.1 200")  # nothing between the HEAD's head and the next


def test_a_stream_is_chunked_and_its_head_leaves_before_its_first_part() -> None:
    """Without a content-length the answer is chunked; the client sees the status at once."""
    release = asyncio.Event()
    loop: list[asyncio.AbstractEventLoop] = []

    async def stream(scope: Scope, receive: Receive, send: Send) -> None:
        del scope, receive
        loop.append(asyncio.get_running_loop())
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await release.wait()
        for part in (b"one", b"two"):
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    with serving(stream) as server, connect(server) as client:
        client.sendall(b"GET /s HTTP/1.1\r\nHost: t\r\n\r\n")
        head = client.recv(65536)
        assert head.startswith(b"HTTP/1.1 200")
        assert b"transfer-encoding: chunked" in head
        loop[0].call_soon_threadsafe(release.set)
        received = b""
        while not received.endswith(b"0\r\n\r\n"):
            chunk = client.recv(65536)
            assert chunk
            received += chunk
    assert received == b"3\r\none\r\n3\r\ntwo\r\n0\r\n\r\n"


async def failing(scope: Scope, receive: Receive, send: Send) -> None:
    del scope, receive, send
    raise ValueError("a bug in the app")


async def splitting(scope: Scope, receive: Receive, send: Send) -> None:
    del scope, receive
    headers = [(b"x-note", b"a\r\nset-cookie: stolen=1")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})


async def failing_after_start(scope: Scope, receive: Receive, send: Send) -> None:
    del scope, receive
    headers = [(b"content-length", b"2")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    raise ValueError("a bug between the head and the body")


@pytest.mark.parametrize(
    "app",
    [failing, splitting, failing_after_start],
    ids=["raises", "header-with-newline", "raises-after-start"],
)
def test_an_app_failing_before_its_answer_gets_a_500_and_the_connection_closes(
    app: Callable[..., Awaitable[None]],
) -> None:
    """An exception before any byte left (even after `http.response.start`), or a header that
    would split the response, is a 500; nothing else."""
    with serving(app) as server, connect(server) as client:
        client.sendall(b"GET /x HTTP/1.1\r\nHost: t\r\n\r\n")
        answer = read_until_closed(client)
    assert answer.startswith(b"HTTP/1.1 500 Internal Server Error\r\n")
    assert b"stolen" not in answer


MALFORMED = {
    "not-http": b"NOT HTTP AT ALL\r\n\r\n",
    "nul-in-a-value": b"GET /a HTTP/1.1\r\nHost: t\r\nX-A: a\x00b\r\n\r\n",
    "nul-in-the-path": b"GET /a\x00b HTTP/1.1\r\nHost: t\r\n\r\n",
    "cr-in-a-value": b"GET /a HTTP/1.1\r\nHost: t\r\nX-A: a\rb\r\n\r\n",
    "bare-lf": b"GET /a HTTP/1.1\nHost: t\n\n",
    "negative-length": b"POST /a HTTP/1.1\r\nHost: t\r\nContent-Length: -5\r\n\r\n",
    "two-lengths": (
        b"POST /a HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab"
    ),
}


@pytest.mark.parametrize("request_bytes", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_request_is_400_and_closed(request_bytes: bytes) -> None:
    """Control bytes, bare LFs and ambiguous lengths (request smuggling's tools) are refused."""
    with serving(echo) as server, connect(server) as client:
        client.sendall(request_bytes)
        answer = read_until_closed(client)
        assert answer.startswith(b"HTTP/1.1 400")
        with connect(server) as other:  # the server goes on
            other.sendall(b"GET /next HTTP/1.1\r\nHost: t\r\n\r\n")
            assert read_response(other)[1] == b"GET /next "


def test_ten_thousand_headers_under_the_limit_are_served() -> None:
    """10,000 short headers (60 KB, under the 64 KiB default) reach the app, all of them."""
    seen: list[int] = []

    async def count(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(len(scope["headers"]))
        await echo(scope, receive, send)

    with serving(count) as server, connect(server) as client:
        client.sendall(b"GET /h HTTP/1.1\r\nHost: t\r\n" + b"X: y\r\n" * 10_000 + b"\r\n")
        assert read_response(client)[1] == b"GET /h "
    assert seen == [10_001]


def test_an_upgrade_request_is_answered_as_a_request_and_the_connection_closed() -> None:
    """No websockets: the request is answered and the connection ends after it."""
    with serving(echo) as server, connect(server) as client:
        client.sendall(
            b"GET /ws HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
        )
        answer = read_until_closed(client)
    assert answer.startswith(b"HTTP/1.1 200")
    assert answer.endswith(b"GET /ws ")


def test_a_client_leaving_is_seen_by_the_app_as_a_disconnect() -> None:
    """After the body, receive() returns http.disconnect once the client is gone."""
    seen: list[str] = []
    done = asyncio.Event()
    loop: list[asyncio.AbstractEventLoop] = []

    async def watch(scope: Scope, receive: Receive, send: Send) -> None:
        del scope, send
        loop.append(asyncio.get_running_loop())
        seen.append((await receive())["type"])
        seen.append((await receive())["type"])
        done.set()

    with serving(watch) as server:
        with connect(server) as client:
            client.sendall(b"GET /w HTTP/1.1\r\nHost: t\r\n\r\n")
            wait_until(lambda: len(seen) == 1, WAIT_S)
        wait_until(lambda: len(seen) == 2, WAIT_S)
    assert seen == ["http.request", "http.disconnect"]


def test_a_large_body_reaches_the_app_whole_and_the_connection_goes_on() -> None:
    """A 3 MiB body (read past the 64 KiB the connection buffers unasked) arrives whole."""
    body = bytes(range(256)) * (3 * 4096)
    with serving(echo) as server, connect(server) as client:
        client.sendall(b"POST /big HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % len(body))
        client.sendall(body)
        assert read_response(client)[1] == b"POST /big " + body
        client.sendall(b"GET /after HTTP/1.1\r\nHost: t\r\n\r\n")
        assert read_response(client)[1] == b"GET /after "


def test_a_chunked_request_body_is_read() -> None:
    """A request body in chunked transfer coding (no content-length) reaches the app."""
    with serving(echo) as server, connect(server) as client:
        client.sendall(
            b"POST /c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
        )
        assert read_response(client)[1] == b"POST /c abcde"
