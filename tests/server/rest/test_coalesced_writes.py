"""A REST connection's coalesced writes, over real sockets: order, bounds, flow control, close."""

from __future__ import annotations

import asyncio
import socket

import pytest

from servinglib.server.rest._limited_protocol import (
    _COALESCED_BYTES,
    _CoalescedWrites,
)


class _Writer(asyncio.Protocol):
    """The writing end's protocol: counts the transport's pause_writing calls."""

    def __init__(self) -> None:
        self.paused = 0

    def pause_writing(self) -> None:
        self.paused += 1

    def resume_writing(self) -> None:
        pass


async def _pair() -> tuple[_CoalescedWrites, asyncio.Transport, _Writer, socket.socket]:
    """A coalescing transport over a real connected socket, and the raw peer socket."""
    ours, peer = socket.socketpair()
    peer.setblocking(False)
    writer = _Writer()
    loop = asyncio.get_running_loop()
    transport, _ = await loop.create_connection(lambda: writer, sock=ours)
    return _CoalescedWrites(transport, loop), transport, writer, peer  # type: ignore[arg-type]


async def _read_all(peer: socket.socket, size: int) -> bytes:
    loop = asyncio.get_running_loop()
    received = bytearray()
    while len(received) < size:
        chunk = await asyncio.wait_for(loop.sock_recv(peer, 1 << 20), 10)
        if not chunk:
            break
        received += chunk
    return bytes(received)


def test_writes_of_every_size_arrive_whole_and_in_order() -> None:
    """Small and large writes, within one turn and across turns, arrive as written."""

    async def run() -> None:
        coalesced, transport, _, peer = await _pair()
        pieces = [b"head\r\n", b"x" * 10, b"y" * (_COALESCED_BYTES + 1), b"tail", b"z" * 3000]
        for piece in pieces[:3]:
            coalesced.write(piece)
        await asyncio.sleep(0)
        for piece in pieces[3:]:
            coalesced.write(piece)
        expected = b"".join(pieces)
        assert await _read_all(peer, len(expected)) == expected
        transport.close()
        peer.close()

    asyncio.run(run())


def test_small_writes_wait_for_the_end_of_the_turn_then_leave_together() -> None:
    """Nothing small reaches the socket while the writing task runs; all of it does after."""

    async def run() -> None:
        coalesced, transport, _, peer = await _pair()
        coalesced.write(b"HTTP/1.1 200 OK\r\n\r\n")
        coalesced.write(b"{}")
        with pytest.raises(BlockingIOError):
            peer.recv(100)  # held: the turn has not ended
        assert await _read_all(peer, 21) == b"HTTP/1.1 200 OK\r\n\r\n{}"
        transport.close()
        peer.close()

    asyncio.run(run())


def test_a_stream_written_in_one_turn_reaches_flow_control() -> None:
    """8 MiB written in 1 KiB pieces without yielding pauses the writer: past the bound the
    writes reach the transport, whose flow control sees them."""

    async def run() -> None:
        coalesced, transport, writer, peer = await _pair()
        for _ in range(8 * 1024):
            coalesced.write(b"c" * 1024)
        assert writer.paused >= 1  # (an unbounded hold would have written nothing yet)
        transport.abort()
        peer.close()

    asyncio.run(run())


@pytest.mark.parametrize("ending", ["close", "write_eof"])
def test_closing_writes_what_is_held_first(ending: str) -> None:
    """close() and write_eof() send the held bytes before ending the connection."""

    async def run() -> None:
        coalesced, transport, _, peer = await _pair()
        coalesced.write(b"last words")
        getattr(coalesced, ending)()
        assert await _read_all(peer, 11) == b"last words"
        transport.close()
        peer.close()

    asyncio.run(run())
