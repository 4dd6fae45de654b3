"""uvicorn's httptools protocol, enforcing HttpLimits (imported only with the REST server)."""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import time
from collections.abc import Callable
from typing import Any, Final

from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT, FlowControl
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from servinglib.server.rest.http_limits import HttpLimits

_log = logging.getLogger("servinglib.server.rest")

_LINGER_S: Final = 2.0  # how long a refused connection's bytes are dropped before it is closed
# Refused connections lingering at once, past which one is closed after its answer: they are
# outside max_connections, and a flood of refusals must not take the descriptors that leaves.
_MAX_LINGERING: Final = 32
_PIECE_BYTES: Final = 4096  # parsed at a time: requests of a read are queued this many at most
_BODY_PIECE_BYTES: Final = HIGH_WATER_LIMIT  # inside a body, where uvicorn pauses at 64 KiB
_COALESCED_BYTES: Final = 64 * 1024  # held for the end of the loop's turn at most, per connection
_MAX_PIPELINED: Final = 4  # requests queued behind the one answered, past which parsing stops
_NOTHING: Final = memoryview(b"")
_REASONS: Final = {
    408: b"Request Timeout",
    431: b"Request Header Fields Too Large",
    503: b"Service Unavailable",
}


def limited_protocol(limits: HttpLimits) -> Any:  # noqa: ANN401 - a protocol factory for uvicorn
    """The protocol factory to pass as uvicorn's ``http``, with ``limits`` and their cap.

    The connections it makes share their registers of those reading headers
    and of those refused and lingering.
    """
    return functools.partial(
        LimitedHttpToolsProtocol,
        limits=limits,
        cap=limits.connection_cap(),
        reading_headers={},
        lingering=set(),
    )


class LimitedHttpToolsProtocol(HttpToolsProtocol):
    """One HTTP/1.1 connection under :class:`HttpLimits`.

    Thread safety: none needed; uvicorn runs every protocol on its event loop.
    """

    _flow: _HoldingFlowControl  # uvicorn's flow, set when the connection is made

    def __init__(
        self,
        *args: Any,  # noqa: ANN401 - uvicorn's arguments
        limits: HttpLimits,
        cap: int,
        reading_headers: dict[LimitedHttpToolsProtocol, None],
        lingering: set[LimitedHttpToolsProtocol],
        **kwargs: Any,  # noqa: ANN401
    ) -> None:
        super().__init__(*args, **kwargs)
        self._limits = limits
        self._cap = cap
        # The server's connections reading a request's line and headers, the earliest first.
        self._all_reading_headers = reading_headers
        self._all_lingering = lingering  # the server's refused connections not yet closed
        self._in_message = False  # from a request's first byte to its last
        self._reading_headers = False  # from a request's first byte to the end of its headers
        self._messages_begun = 0
        self._header_bytes = 0
        self._idle_since: float | None = None  # None while a request is read or answered
        self._read_deadline: asyncio.TimerHandle | None = None
        self._refused = False
        self._unparsed = _NOTHING  # what was read but is held until queued requests are answered
        self._parse_scheduled = False
        self._unanswered: collections.deque[Any] = collections.deque()  # cycles, oldest first

    @property
    def unparsed_bytes(self) -> int:
        """Bytes read from the client but held unparsed (at most one read)."""
        return len(self._unparsed)

    @property
    def idle_since(self) -> float | None:
        """When the connection last became idle (``time.monotonic()``); None while in a request."""
        return self._idle_since

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        # The cycles write responses through this (a transport in all but its type).
        self.transport = _CoalescedWrites(transport, self.loop)  # type: ignore[assignment]
        self._flow = _HoldingFlowControl(transport, self._schedule_parse)
        self.flow = self._flow
        if len(self.connections) > self._cap and not self._evict_idle():
            _log.warning("REST: %d connections open, the most allowed; answering 503", self._cap)
            self._refuse(503, f"The server has its {self._cap} connections open; retry later")
            return
        self._idle_since = time.monotonic()
        self.timeout_keep_alive_task = self.loop.call_later(
            self.timeout_keep_alive, self.timeout_keep_alive_handler
        )

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_read_deadline()
        self._all_reading_headers.pop(self, None)
        self._all_lingering.discard(self)
        self._unparsed = _NOTHING
        # uvicorn tells only its newest cycle; the one answering may be an older pipelined one.
        for cycle in self._unanswered:
            if not cycle.response_complete:
                cycle.disconnected = True
                cycle.message_event.set()
        self._unanswered.clear()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if self._unparsed:  # not expected: reading is paused while bytes are held
            self._unparsed = memoryview(bytes(self._unparsed) + data)
        else:
            self._unparsed = memoryview(data)
        self._parse_unparsed()

    def _parse_unparsed(self) -> None:
        """Parses what is held piece by piece, holding the rest while requests are queued."""
        unparsed, offset = self._unparsed, 0
        while offset < len(unparsed) and not self._refused and not self.transport.is_closing():
            if len(self.pipeline) >= _MAX_PIPELINED or (
                self.flow.read_paused and not self.pipeline
            ):
                self._unparsed = unparsed[offset:]
                self._flow.hold()
                return
            size = (
                _BODY_PIECE_BYTES
                if self._in_message and not self._reading_headers
                else _PIECE_BYTES
            )
            self._parse(unparsed[offset : offset + size])
            offset += size
        self._unparsed = _NOTHING
        self._flow.release()

    def _schedule_parse(self) -> None:
        """Parses what is held soon: reading resumed (a response completed, a body was taken)."""
        if not self._parse_scheduled:
            self._parse_scheduled = True
            self.loop.call_soon(self._parse_held)

    def _parse_held(self) -> None:
        self._parse_scheduled = False
        if self._unparsed and not self.transport.is_closing():
            self._parse_unparsed()

    def _parse(self, data: memoryview) -> None:
        idle_before = not self._in_message
        headers_before = self._reading_headers
        begun = self._messages_begun
        super().data_received(data)  # type: ignore[arg-type] # httptools takes any buffer
        if not self._reading_headers or self.transport.is_closing():
            return
        # Count the read only when all of it belongs to the headers being read: it began them
        # or continued them.  A read that ends one message and begins the next is not counted,
        # which can let one read more through, never a false 431.
        if (headers_before and self._messages_begun == begun) or (
            idle_before and self._messages_begun == begun + 1
        ):
            self._header_bytes += len(data)
        if self._header_bytes > self._limits.max_header_bytes:
            self._refuse_headers()

    # The parser's callbacks that act do nothing once the connection is refused: the rest of
    # the read that held its end is still parsed (on_url and on_header only collect).
    def on_message_begin(self) -> None:
        if self._refused:
            return
        super().on_message_begin()
        self._messages_begun += 1
        self._in_message = True
        self._reading_headers = True
        self._header_bytes = 0
        self._idle_since = None
        self._read_deadline = self.loop.call_later(
            self._limits.request_read_timeout_s, self._on_read_timeout
        )
        self._all_reading_headers[self] = None
        if len(self._all_reading_headers) > max(1, self._cap // 2):
            earliest = next(iter(self._all_reading_headers))
            earliest._refuse(  # noqa: SLF001 - a connection of the same server
                408, "Too many connections are sending their headers; this one began first"
            )

    def on_headers_complete(self) -> None:
        if self._refused:
            return
        self._reading_headers = False
        self._all_reading_headers.pop(self, None)
        # The exact size, for headers that arrived within one read (the count above is only
        # kept across reads): the request line's URL and each header line.
        size = len(self.url) + sum([len(name) + len(value) + 4 for name, value in self.headers])
        if size > self._limits.max_header_bytes:
            self._refuse_headers()
            return
        super().on_headers_complete()
        self._unanswered.append(self.cycle)

    def on_body(self, body: bytes) -> None:
        if not self._refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if self._refused:
            return
        self._in_message = False
        self._cancel_read_deadline()
        super().on_message_complete()

    def on_response_complete(self) -> None:
        while self._unanswered and self._unanswered[0].response_complete:
            self._unanswered.popleft()
        super().on_response_complete()
        if self.timeout_keep_alive_task is not None:  # uvicorn waits for the next request
            self._idle_since = time.monotonic()

    def _on_read_timeout(self) -> None:
        self._read_deadline = None
        if self.transport.is_closing():
            return
        seconds = self._limits.request_read_timeout_s
        if self._reading_headers or not self.cycle.response_started:
            self._refuse(408, f"The request did not arrive within {seconds:g} s")
        else:  # the app answers before the body has arrived: cut it off
            self.transport.close()

    def _evict_idle(self) -> bool:
        """Closes the connection idle longest to make room; False if none is idle."""
        idle = [
            connection
            for connection in self.connections
            if isinstance(connection, LimitedHttpToolsProtocol)
            and connection is not self
            and connection.idle_since is not None
            and not connection.transport.is_closing()
        ]
        if not idle:
            return False
        oldest = min(idle, key=lambda connection: connection.idle_since or 0.0)
        oldest.transport.close()
        return True

    def _refuse_headers(self) -> None:
        limit = self._limits.max_header_bytes
        self._refuse(431, f"The request line and headers exceed {limit} bytes")

    def _refuse(self, status: int, message: str) -> None:
        """Answers ``status`` in JSON, half-closes, and drops what the client still sends.

        Closes the connection after the answer instead when 32 refused
        connections already linger.
        """
        self._refused = True
        self._cancel_read_deadline()
        self._all_reading_headers.pop(self, None)
        self._unset_keepalive_if_required()
        self._idle_since = None
        self.connections.discard(self)  # its slot is free now; the linger timer closes it
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            cycle.disconnected = True  # the app reading this request's body sees it end
            cycle.message_event.set()
        body = b'{"error": "' + message.encode("ascii") + b'"}'
        head = b"HTTP/1.1 %d %s\r\n" % (status, _REASONS[status])
        self.transport.write(
            head
            + b"content-type: application/json\r\n"
            + b"content-length: %d\r\n" % len(body)
            + b"connection: close\r\n\r\n"
            + body
        )
        if self.transport.can_write_eof():
            self.transport.write_eof()
        if len(self._all_lingering) >= _MAX_LINGERING:
            self.transport.close()  # after the answer is written
            return
        self._all_lingering.add(self)
        self.loop.call_later(_LINGER_S, self._end_linger)

    def _end_linger(self) -> None:
        self._all_lingering.discard(self)
        self.transport.close()

    def _cancel_read_deadline(self) -> None:
        if self._read_deadline is not None:
            self._read_deadline.cancel()
            self._read_deadline = None


class _CoalescedWrites:
    """A connection's transport whose small writes within one turn of the event loop go out
    together at the turn's end.

    uvicorn writes a response's status line and headers, then its body: two system calls,
    two TCP segments and two wake-ups of the client for a small answer, made while the
    request's task still runs.  Here they leave in one write once the task has finished its
    turn (measured: about a quarter less server CPU per small request).  At most
    ``_COALESCED_BYTES`` are held: a write that would hold more goes out at once with what
    is held, so a stream still reaches the transport and its flow control.  A close or
    half-close writes what is held first.  Everything else is the transport's.
    Thread safety: none needed; used on the event loop only.
    """

    __slots__ = ("_held", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None

    def write(self, data: bytes) -> None:
        held = self._held
        if held is None:
            if len(data) > _COALESCED_BYTES:
                self._transport.write(data)
                return
            self._held = bytes(data)
            self._loop.call_soon(self._flush)
        elif len(held) + len(data) > _COALESCED_BYTES:
            self._held = None
            self._transport.writelines((held, data))  # (the large one is not copied)
        else:
            self._held = held + data

    def _flush(self) -> None:
        held, self._held = self._held, None
        if held is not None and not self._transport.is_closing():
            self._transport.write(held)

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def write_eof(self) -> None:
        self._flush()
        self._transport.write_eof()

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def abort(self) -> None:
        self._held = None
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:  # noqa: ANN401 - the transport's own
        return getattr(self._transport, name)


class _HoldingFlowControl(FlowControl):
    """uvicorn's FlowControl, also keeping reading paused while the protocol holds bytes.

    The socket is read only when neither uvicorn paused it nor the protocol
    holds; when uvicorn resumes (a response completed, the app took a body)
    while the protocol holds, ``on_resume`` is called instead.
    Thread safety: none needed; used on the event loop only.
    """

    def __init__(self, transport: asyncio.Transport, on_resume: Callable[[], None]) -> None:
        super().__init__(transport)
        self.holding = False
        self._on_resume = on_resume

    def pause_reading(self) -> None:
        if not self.read_paused:
            self.read_paused = True
            if not self.holding:
                self._transport.pause_reading()

    def resume_reading(self) -> None:
        if self.read_paused:
            self.read_paused = False
            if not self.holding:
                self._transport.resume_reading()
        if self.holding:
            self._on_resume()

    def hold(self) -> None:
        """Stops reading until :meth:`release`, whatever uvicorn asks."""
        if not self.holding:
            self.holding = True
            if not self.read_paused:
                self._transport.pause_reading()

    def release(self) -> None:
        """Reads again, unless uvicorn paused reading itself."""
        if self.holding:
            self.holding = False
            if not self.read_paused:
                self._transport.resume_reading()
