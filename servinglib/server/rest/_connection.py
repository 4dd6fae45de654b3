"""One HTTP/1.1 connection: requests parsed by httptools, answered by an ASGI app, under
HttpLimits (imported only with the REST server; uvicorn runs the listener around it)."""

from __future__ import annotations

import asyncio
import collections
import functools
import http
import itertools
import logging
import re
import urllib.parse
from typing import Any, Final, cast

import httptools

from servinglib.server.rest.http_limits import HttpLimits

_log = logging.getLogger("servinglib.server.rest")

_LINGER_S: Final = 2.0  # how long a refused connection's bytes are dropped before it is closed
# Refused connections lingering at once, past which one is closed after its answer: they are
# outside max_connections, and a flood of refusals must not take the descriptors that leaves.
_MAX_LINGERING: Final = 32
_PIECE_BYTES: Final = 4096  # parsed at a time: requests of a read are queued this many at most
_BODY_PIECE_BYTES: Final = 64 * 1024  # inside a body
_BODY_HIGH_WATER: Final = 64 * 1024  # a body buffered past this, unread by the app: stop reading
_COPIED_BYTES: Final = 64 * 1024  # a body up to this is joined to its head for one write
_MAX_PIPELINED: Final = 4  # requests queued behind the one answered, past which parsing stops
_NOTHING: Final = memoryview(b"")
_REFUSALS: Final = {
    408: b"Request Timeout",
    431: b"Request Header Fields Too Large",
    503: b"Service Unavailable",
}
_STATUS_LINES: Final = {
    status.value: b"HTTP/1.1 %d %s\r\n" % (status.value, status.phrase.encode("ascii"))
    for status in http.HTTPStatus
}
_BAD_NAMES: Final = re.compile(b'[\x00-\x1f\x7f()<>@,;:\\[\\]={} \t\\\\"]')
_BAD_VALUES: Final = re.compile(b"[\x00-\x08\x0a-\x1f\x7f]")
_METHODS: Final = {m.encode(): m for m in ("GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS")}
_ASGI: Final = {"version": "3.0", "spec_version": "2.3"}
_DISCONNECT: Final = {"type": "http.disconnect"}
_INTERNAL_ERROR: Final = (
    b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: 21\r\nconnection: close\r\n\r\nInternal Server Error"
)


def connection_factory(app: Any, limits: HttpLimits) -> Any:  # noqa: ANN401 - for uvicorn
    """The protocol factory to pass as uvicorn's ``http``: connections serving ``app``
    under ``limits``, sharing their server's registers (see :class:`_Registers`)."""
    return functools.partial(HttpConnection, app=app, registers=_Registers(limits))


class _Registers:
    """What one server's connections share: the limits, the connection cap, those reading
    headers (the earliest first) and those refused and lingering.
    Thread safety: none needed; used on the server's event loop only."""

    def __init__(self, limits: HttpLimits) -> None:
        self.limits = limits
        self.cap = limits.connection_cap()
        self.reading_headers: dict[HttpConnection, None] = {}
        self.lingering: set[HttpConnection] = set()
        # numbers connections as they go idle: the lowest has been idle longest (deadlines
        # tie, uvloop's clock counting milliseconds)
        self.idle_order = itertools.count()
        self._default_headers: object = None
        self._default_head = b""

    def default_head(self, headers: list[tuple[bytes, bytes]]) -> bytes:
        """``headers`` as a response's lines, made again only when uvicorn makes a new list."""
        if headers is not self._default_headers:
            self._default_head = b"".join(b"%s: %s\r\n" % (n.lower(), v) for n, v in headers)
            self._default_headers = headers
        return self._default_head


class HttpConnection(asyncio.Protocol):
    """One HTTP/1.1 connection under :class:`HttpLimits`, its requests answered by an ASGI
    app one at a time, in order (pipelined ones wait their turn).

    uvicorn's server makes one per accepted connection (with its ``config``,
    ``server_state`` and ``app_state``) and asks it to :meth:`shutdown`; its
    ``server_state`` counts the connections and the requests' tasks, which
    uvicorn waits for and cancels at the end of its grace.

    A small response leaves in one write (status line, headers and body
    together).  Timeouts cost no timer per request: the connection keeps one
    deadline, moved as it goes idle or begins a request, and one timer that,
    when it fires early, sleeps again until the deadline moved to.
    Thread safety: none needed; uvicorn runs every connection on its event loop.
    """

    def __init__(
        self,
        config: Any,  # noqa: ANN401 - uvicorn's Config
        server_state: Any,  # noqa: ANN401 - uvicorn's ServerState
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
        *,
        app: Any,  # noqa: ANN401 - the ASGI application
        registers: _Registers,
    ) -> None:
        del app_state  # lifespan is off: the app keeps no state through it
        self._loop = _loop or asyncio.get_running_loop()
        self._app = app
        self._registers = registers
        self._limits = registers.limits
        self._idle_timeout_s: float = config.timeout_keep_alive
        self._server_state = server_state
        self._connections: set[Any] = server_state.connections
        self._tasks: set[asyncio.Task[None]] = server_state.tasks
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._scheme = "http"
        self._server: tuple[str, int] | None = None
        self._client: tuple[str, int] | None = None
        # Requests parsed and not yet answered, the one being answered first.
        self._exchanges: collections.deque[_Exchange] = collections.deque()
        self._parsing: _Exchange | None = None  # the request whose body is being parsed
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._expects_continue = False
        self._in_message = False  # from a request's first byte to its last
        self._reading_headers = False  # from a request's first byte to the end of its headers
        self._messages_begun = 0
        self._header_bytes = 0  # bytes fed to the parser while headers were read
        self._header_size = 0  # the request line's URL and its header lines, exactly
        self._unparsed = _NOTHING  # read but held until queued requests are answered
        self._holding = False  # reading paused while bytes are held
        self._body_paused = False  # reading paused while a body waits for the app
        self._parse_scheduled = False
        self._refused = False
        self._closing_after = False  # shutting down: close once the current answer is sent
        self._write_paused = False
        self._drained: asyncio.Future[None] | None = None
        self._deadline = 0.0  # loop time; 0: none (a request is being answered)
        self._deadline_reads = False  # the deadline is a request's (408), not idleness
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = 0.0
        self._went_idle = 0  # the registers' idle_order when it last went idle

    # -- what tests and the server read ----------------------------------------------------

    @property
    def queued_requests(self) -> int:
        """Requests parsed and waiting behind the one being answered."""
        return max(0, len(self._exchanges) - 1)

    @property
    def unparsed_bytes(self) -> int:
        """Bytes read from the client but held unparsed (at most one read)."""
        return len(self._unparsed)

    @property
    def reading_headers(self) -> bool:
        """Whether a request's line and headers are arriving."""
        return self._reading_headers

    @property
    def idle(self) -> bool:
        """Whether no request is arriving or being answered."""
        return not self._in_message and not self._exchanges

    # -- asyncio's protocol ----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast("asyncio.Transport", transport)  # uvloop's are not registered as one
        self._transport = transport
        self._server = _address(transport.get_extra_info("sockname"))
        self._client = _address(transport.get_extra_info("peername"))
        if transport.get_extra_info("sslcontext") is not None:
            self._scheme = "https"
        self._connections.add(self)
        if len(self._connections) > self._registers.cap and not self._evict_idle():
            cap = self._registers.cap
            _log.warning("REST: %d connections open, the most allowed; answering 503", cap)
            self._refuse(503, f"The server has its {cap} connections open; retry later")
            return
        self._set_deadline(self._idle_timeout_s, reads=False)

    def connection_lost(self, exc: Exception | None) -> None:
        del exc
        self._connections.discard(self)
        self._registers.reading_headers.pop(self, None)
        self._registers.lingering.discard(self)
        self._unparsed = _NOTHING
        self._deadline = 0.0
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for exchange in self._exchanges:  # (the one being parsed among them)
            exchange.disconnect()
        self._wake_writers()

    def eof_received(self) -> bool | None:
        return None  # the transport closes: a half-closed client gets no answer (as uvicorn)

    def pause_writing(self) -> None:
        self._write_paused = True

    def resume_writing(self) -> None:
        self._write_paused = False
        self._wake_writers()

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if (
            not self._unparsed
            and len(data) <= _PIECE_BYTES
            and len(self._exchanges) <= _MAX_PIPELINED
            and not self._body_paused
        ):
            self._parse(data)  # the common read: one small request, nothing held
            return
        if self._unparsed:  # not expected: reading is paused while bytes are held
            self._unparsed = memoryview(bytes(self._unparsed) + data)
        else:
            self._unparsed = memoryview(data)
        self._parse_unparsed()

    def shutdown(self) -> None:
        """The server stops (uvicorn calls this): idle, close now; else after this answer."""
        transport = self._transport
        if transport is None:
            return
        if self.idle:
            transport.close()
        else:
            self._closing_after = True

    # -- parsing ---------------------------------------------------------------------------

    def _parse_unparsed(self) -> None:
        """Parses what is held piece by piece, holding the rest while requests are queued
        or a body waits for the app."""
        transport = self._transport
        assert transport is not None
        unparsed, offset = self._unparsed, 0
        while offset < len(unparsed) and not self._refused and not transport.is_closing():
            if len(self._exchanges) > _MAX_PIPELINED or self._body_paused:
                self._unparsed = unparsed[offset:]
                self._hold()
                return
            if self._in_message and not self._reading_headers:
                size = _BODY_PIECE_BYTES
            else:
                size = _PIECE_BYTES
            self._parse(unparsed[offset : offset + size])
            offset += size
        self._unparsed = _NOTHING
        self._release()

    def _parse(self, data: bytes | memoryview) -> None:
        idle_before = not self._in_message
        headers_before = self._reading_headers
        begun = self._messages_begun
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            # An Upgrade (a websocket) is not served: the request is answered as any other,
            # what follows it is not parsed, and the connection closes after the answer.
            if self._exchanges:
                self._exchanges[-1].keep_alive = False
            return
        except httptools.HttpParserError:
            self._bad_request()
            return
        if not self._reading_headers or self._refused:
            return
        # Count the read only when all of it belongs to the headers being read: it began them
        # or continued them.  A read that ends one message and begins the next is not counted,
        # which can let one read more through, never a false 431.  (httptools collects a
        # header's value whole before handing it over: only this count bounds it.)
        if (headers_before and self._messages_begun == begun) or (
            idle_before and self._messages_begun == begun + 1
        ):
            self._header_bytes += len(data)
        if self._header_bytes > self._limits.max_header_bytes:
            self._refuse_headers()

    def _schedule_parse(self) -> None:
        """Parses what is held soon: an answer was sent, or the app took a body."""
        if not self._parse_scheduled:
            self._parse_scheduled = True
            self._loop.call_soon(self._parse_held)

    def _parse_held(self) -> None:
        self._parse_scheduled = False
        transport = self._transport
        if self._unparsed and transport is not None and not transport.is_closing():
            self._parse_unparsed()

    def _hold(self) -> None:
        if not self._holding:
            self._holding = True
            self._set_reading()

    def _release(self) -> None:
        if self._holding:
            self._holding = False
            self._set_reading()

    def _set_reading(self) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if self._holding or self._body_paused:
            transport.pause_reading()
        else:
            transport.resume_reading()

    # The parser's callbacks that act do nothing once the connection is refused: the rest of
    # the read that held its end is still parsed (on_url and on_header only collect).
    def on_message_begin(self) -> None:
        if self._refused:
            return
        self._messages_begun += 1
        self._in_message = True
        self._reading_headers = True
        self._header_bytes = 0
        self._header_size = 0
        self._url = b""
        self._headers = []
        self._expects_continue = False
        self._set_deadline(self._limits.request_read_timeout_s, reads=True)
        reading = self._registers.reading_headers
        reading[self] = None
        if len(reading) > max(1, self._registers.cap // 2):
            earliest = next(iter(reading))
            earliest._refuse(  # noqa: SLF001 - a connection of the same server
                408, "Too many connections are sending their headers; this one began first"
            )

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._header_size += len(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_size += len(name) + len(value) + 4
        name = name.lower()
        if name == b"expect" and value.lower() == b"100-continue":
            self._expects_continue = True
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        if self._refused:
            return
        self._reading_headers = False
        self._registers.reading_headers.pop(self, None)
        # The exact size, for headers that arrived within one read (the count above is only
        # kept across reads): the request line's URL and each header line.
        if self._header_size > self._limits.max_header_bytes:
            self._refuse_headers()
            return
        parser = self._parser
        url = httptools.parse_url(self._url)
        raw_path: bytes = url.path
        path = raw_path.decode("latin-1")
        if "%" in path:
            path = urllib.parse.unquote(path)
        raw_method = parser.get_method()
        method = _METHODS.get(raw_method) or raw_method.decode("latin-1")
        version = parser.get_http_version()
        scope = {
            "type": "http",
            "asgi": _ASGI,
            "http_version": version,
            "server": self._server,
            "client": self._client,
            "scheme": self._scheme,
            "root_path": "",
            "headers": self._headers,
            "method": method,
            "path": path,
            "raw_path": raw_path,
            "query_string": url.query or b"",
        }
        exchange = _Exchange(self, scope, version != "1.0" and parser.should_keep_alive())
        exchange.waiting_for_continue = self._expects_continue
        self._parsing = exchange
        self._exchanges.append(exchange)
        if len(self._exchanges) == 1:
            self._start(exchange)

    def on_body(self, body: bytes) -> None:
        exchange = self._parsing
        if self._refused or exchange is None or exchange.response_complete:
            return  # answered already (before its body arrived): the rest is dropped
        exchange.body.append(body)
        exchange.buffered += len(body)
        if exchange.buffered > _BODY_HIGH_WATER and not self._body_paused:
            self._body_paused = True
            self._set_reading()
        exchange.wake()

    def on_message_complete(self) -> None:
        if self._refused:
            return
        self._in_message = False
        exchange = self._parsing
        self._parsing = None
        if exchange is not None:
            exchange.complete = True
            exchange.wake()
        if self._exchanges:  # read: being answered, or waiting its turn
            self._set_deadline(0.0, reads=False)
        else:  # answered before its body ended
            self._set_deadline(self._idle_timeout_s, reads=False)

    # -- answering ---------------------------------------------------------------------------

    def _start(self, exchange: _Exchange) -> None:
        task = self._loop.create_task(exchange.run(self._app))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def body_taken(self) -> None:
        """The app took a body's buffered bytes: read again if that paused reading."""
        if self._body_paused:
            self._body_paused = False
            self._set_reading()
            if self._unparsed:
                self._schedule_parse()

    def answered(self, exchange: _Exchange) -> None:
        """``exchange``'s response is complete: the next request's turn, or idleness."""
        self._server_state.total_requests += 1
        if self._exchanges and self._exchanges[0] is exchange:
            self._exchanges.popleft()
        exchange.body = []  # a body the app did not read: dropped, as what still arrives of it
        if self._body_paused:
            self._body_paused = False
            self._set_reading()
        transport = self._transport
        assert transport is not None
        if not exchange.keep_alive or self._closing_after:
            transport.close()
            return
        if transport.is_closing():
            return
        if self._exchanges:
            self._start(self._exchanges[0])
        elif not self._in_message:
            self._set_deadline(self._idle_timeout_s, reads=False)
        if self._unparsed:
            self._schedule_parse()

    async def drain(self) -> None:
        """Returns once the transport takes writes again (or the client is gone)."""
        while self._write_paused and self._transport is not None:
            if self._transport.is_closing():
                return
            if self._drained is None:
                self._drained = self._loop.create_future()
            await self._drained

    def write(self, data: bytes) -> None:
        transport = self._transport
        assert transport is not None
        transport.write(data)

    def future(self) -> asyncio.Future[None]:
        """A new future of the connection's loop (an exchange waits on it for its body)."""
        return self._loop.create_future()

    def default_head(self) -> bytes:
        """uvicorn's headers for every response (``date``, new each second, and ``server``)
        as lines of a response's head."""
        return self._registers.default_head(self._server_state.default_headers)

    def _wake_writers(self) -> None:
        drained, self._drained = self._drained, None
        if drained is not None and not drained.done():
            drained.set_result(None)

    # -- deadlines ---------------------------------------------------------------------------

    def _set_deadline(self, seconds: float, *, reads: bool) -> None:
        """The connection's deadline ``seconds`` from now (0: none); ``reads``: a request's."""
        if not seconds:
            self._deadline = 0.0
            return
        when = self._loop.time() + seconds
        self._deadline = when
        self._deadline_reads = reads
        if not reads:
            self._went_idle = next(self._registers.idle_order)
        if self._timer is None or when < self._timer_at:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = self._loop.call_at(when, self._on_timer)
            self._timer_at = when

    def _on_timer(self) -> None:
        self._timer = None
        when = self._deadline
        transport = self._transport
        if not when or transport is None or transport.is_closing():
            return
        if when > self._loop.time():  # moved on since the timer was set: sleep until then
            self._timer = self._loop.call_at(when, self._on_timer)
            self._timer_at = when
            return
        self._deadline = 0.0
        if not self._deadline_reads:
            transport.close()  # idle too long
            return
        reading = self._parsing
        if self._reading_headers or reading is None or not reading.response_started:
            seconds = self._limits.request_read_timeout_s
            self._refuse(408, f"The request did not arrive within {seconds:g} s")
        else:  # the app answers before the body has arrived: cut it off
            transport.close()

    # -- refusing ------------------------------------------------------------------------------

    def _evict_idle(self) -> bool:
        """Closes the connection idle longest to make room; False if none is idle."""
        idle = [
            connection
            for connection in self._connections
            if isinstance(connection, HttpConnection)
            and connection is not self
            and connection.idle
            and connection._transport is not None  # noqa: SLF001 - same class
            and not connection._transport.is_closing()  # noqa: SLF001
            and not connection._refused  # noqa: SLF001
        ]
        if not idle:
            return False
        oldest = min(idle, key=lambda connection: connection._went_idle)  # noqa: SLF001
        assert oldest._transport is not None  # noqa: SLF001
        oldest._transport.close()  # noqa: SLF001
        return True

    def _refuse_headers(self) -> None:
        limit = self._limits.max_header_bytes
        self._refuse(431, f"The request line and headers exceed {limit} bytes")

    def _refuse(self, status: int, message: str) -> None:
        """Answers ``status`` in JSON, half-closes, and drops what the client still sends.

        Closes the connection after the answer instead when 32 refused
        connections already linger.
        """
        transport = self._transport
        assert transport is not None
        self._refused = True
        self._deadline = 0.0
        self._registers.reading_headers.pop(self, None)
        self._connections.discard(self)  # its slot is free now; the linger timer closes it
        for exchange in self._exchanges:
            exchange.disconnect()  # the app reading this request's body sees it end
        body = b'{"error": "' + message.encode("ascii") + b'"}'
        transport.write(
            b"HTTP/1.1 %d %s\r\n" % (status, _REFUSALS[status])
            + b"content-type: application/json\r\n"
            + b"content-length: %d\r\n" % len(body)
            + b"connection: close\r\n\r\n"
            + body
        )
        self._holding = self._body_paused = False
        self._set_reading()  # the client's further bytes are read and dropped
        if transport.can_write_eof():
            transport.write_eof()
        lingering = self._registers.lingering
        if len(lingering) >= _MAX_LINGERING:
            transport.close()  # after the answer is written
            return
        lingering.add(self)
        self._loop.call_later(_LINGER_S, self._end_linger)

    def _end_linger(self) -> None:
        self._registers.lingering.discard(self)
        if self._transport is not None:
            self._transport.close()

    def _bad_request(self) -> None:
        transport = self._transport
        assert transport is not None
        message = b"Invalid HTTP request received."
        _log.warning("REST: invalid HTTP request received; closing the connection")
        transport.write(
            b"HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain; charset=utf-8\r\n"
            b"content-length: %d\r\nconnection: close\r\n\r\n" % len(message) + message
        )
        transport.close()


class _Exchange:
    """One request and its response: the ASGI ``receive`` and ``send`` of one call of the app.

    Thread safety: none needed; used on the event loop only.
    """

    __slots__ = (
        "body",
        "buffered",
        "chunked",
        "complete",
        "connection",
        "disconnected",
        "head",
        "keep_alive",
        "left",
        "response_complete",
        "response_started",
        "scope",
        "waiter",
        "waiting_for_continue",
    )

    def __init__(self, connection: HttpConnection, scope: dict[str, Any], keep_alive: bool) -> None:
        self.connection = connection
        self.scope = scope
        self.keep_alive = keep_alive
        self.body: list[bytes] = []
        self.buffered = 0
        self.complete = False  # the whole body arrived
        self.disconnected = False
        self.waiter: asyncio.Future[None] | None = None
        self.waiting_for_continue = False
        self.response_started = False
        self.response_complete = False
        self.head = b""  # the status line and headers, sent with the first body bytes
        self.chunked = False
        self.left = 0  # bytes of the body its content-length still expects

    def wake(self) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def disconnect(self) -> None:
        if not self.response_complete:
            self.disconnected = True
        self.wake()

    async def run(self, app: Any) -> None:  # noqa: ANN401 - the ASGI application
        connection = self.connection
        try:
            await app(self.scope, self.receive, self.send)
        except BaseException as error:
            if isinstance(error, Exception):
                _log.exception("REST: exception in the ASGI application")
            # Nothing has left yet (not even a head held for its body): a 500 can still go.
            if not self.disconnected and (not self.response_started or self.head):
                self.keep_alive = False
                self.response_started = self.response_complete = True
                self.head = b""
                connection.write(_INTERNAL_ERROR)
                connection.answered(self)
            elif not self.response_complete and not self.disconnected:
                self._cut()
            if not isinstance(error, Exception):
                raise  # cancelled (the server's grace ended), or the process exits
            return
        if not self.response_complete and not self.disconnected:
            _log.error("REST: the ASGI application returned without completing its response")
            self._cut()

    def _cut(self) -> None:
        self.response_complete = True
        self.keep_alive = False
        self.connection.answered(self)

    async def receive(self) -> dict[str, Any]:
        connection = self.connection
        if self.waiting_for_continue:
            self.waiting_for_continue = False
            if not self.disconnected:
                connection.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        while True:
            if self.disconnected or self.response_complete:
                return _DISCONNECT
            if self.body or (self.complete and self.buffered >= 0):
                chunks = self.body
                body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
                self.body = []
                more = not self.complete
                self.buffered = 0 if more else -1  # -1: delivered, later calls wait for the end
                connection.body_taken()
                return {"type": "http.request", "body": body, "more_body": more}
            self.waiter = connection.future()
            await self.waiter

    async def send(self, message: dict[str, Any]) -> None:
        connection = self.connection
        if connection._write_paused and not self.disconnected:  # noqa: SLF001
            await connection.drain()
        if self.disconnected:
            return  # the client left: its answer is dropped
        kind = message["type"]
        if not self.response_started:
            if kind != "http.response.start":
                raise RuntimeError(f"Expected 'http.response.start', not {kind!r}")
            self._start_response(message["status"], message.get("headers", ()))
            return
        if self.response_complete or kind != "http.response.body":
            raise RuntimeError(f"Unexpected ASGI message {kind!r}")
        body: bytes = message.get("body", b"")
        more = message.get("more_body", False)
        data = self._framed(body, more)
        if data:
            connection.write(data)
        if not more:
            if self.left:
                raise RuntimeError("Response content shorter than Content-Length")
            self.response_complete = True
            self.wake()
            connection.answered(self)

    def _framed(self, body: bytes, more: bool) -> bytes:
        """What goes on the wire for ``body``: the head first if it has not left yet."""
        head, self.head = self.head, b""
        if self.scope["method"] == "HEAD":
            self.left = 0
            return head
        if self.chunked:
            data = head + (b"%x\r\n%s\r\n" % (len(body), body) if body else b"")
            return data + b"0\r\n\r\n" if not more else data
        if len(body) > self.left:
            raise RuntimeError("Response content longer than Content-Length")
        self.left -= len(body)
        if not head:
            return body
        if len(body) > _COPIED_BYTES:
            self.connection.write(head)  # a large body is not copied to join its head
            return body
        return head + body

    def _start_response(self, status: int, headers: Any) -> None:  # noqa: ANN401
        connection = self.connection
        lines = [
            _STATUS_LINES.get(status) or b"HTTP/1.1 %d \r\n" % status,
            connection.default_head(),
        ]
        names: list[bytes] = []
        values: list[bytes] = []
        length: int | None = None
        closes = False
        for name, value in headers:
            lowered = name.lower()
            names.append(lowered)
            values.append(value)
            if lowered == b"content-length" and length is None and not self.chunked:
                length = int(value)
            elif lowered == b"transfer-encoding" and value.lower() == b"chunked":
                self.chunked = True
            elif lowered == b"connection" and b"close" in value.lower():
                self.keep_alive = False
                closes = True
            lines.append(lowered + b": " + value + b"\r\n")
        # One search each over every name and every value (a tab, allowed in values, between).
        if _BAD_NAMES.search(b"".join(names)) or _BAD_VALUES.search(b"\t".join(values)):
            raise RuntimeError(f"Invalid HTTP header in {names!r:.200}")
        self.response_started = True  # (not before: a bad header is answered 500)
        self.waiting_for_continue = False
        if connection._closing_after:  # noqa: SLF001 - its own connection
            self.keep_alive = False
        if not self.keep_alive and not closes:
            lines.append(b"connection: close\r\n")
        if self.chunked:
            length = None
        elif length is None and self.scope["method"] != "HEAD" and status not in (204, 304):
            self.chunked = True
            lines.append(b"transfer-encoding: chunked\r\n")
        self.left = length or 0
        lines.append(b"\r\n")
        if self.chunked:  # a stream: its head leaves now, before its first part is ready
            connection.write(b"".join(lines))
        else:
            self.head = b"".join(lines)


def _address(value: object) -> tuple[str, int] | None:
    if isinstance(value, tuple) and len(value) >= 2:
        return str(value[0]), int(value[1])
    return None
