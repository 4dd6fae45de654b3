"""RestServer's lifecycle on the standard asyncio loop and on uvloop: serve, start, stop."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Coroutine
from typing import Any

import httpx
import pytest
import uvloop

from servinglib.server.rest import RestServer, create_server

LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": uvloop.new_event_loop,
}
LOOP_CLASSES = {"asyncio": asyncio.SelectorEventLoop, "uvloop": uvloop.Loop}


class LoopReporter:
    """An ASGI app answering every request with the class name of the loop serving it."""

    def __init__(self) -> None:
        self.loops: list[type[asyncio.AbstractEventLoop]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        loop = type(asyncio.get_running_loop())
        self.loops.append(loop)
        body = loop.__name__.encode()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})


def run_on(loop_name: str, main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Runs ``main()`` to completion on a new loop of the named kind."""
    with asyncio.Runner(loop_factory=LOOPS[loop_name]) as runner:
        runner.run(main())


@pytest.mark.parametrize("loop_name", sorted(LOOPS))
def test_stop_ends_serve_in_the_same_loop(loop_name: str) -> None:
    """stop() called while ``await serve()`` runs ends it cleanly and the socket is closed."""
    app = LoopReporter()

    async def main() -> None:
        server, port = create_server(app)
        serving = asyncio.create_task(server.serve())
        async with httpx.AsyncClient(timeout=30.0) as client:
            response = await client.get(f"http://127.0.0.1:{port}/")
        assert response.status_code == 200
        server.stop()
        await asyncio.wait_for(serving, 30.0)
        server.stop()  # a second stop after serve() returned is harmless
        assert server._socket.fileno() == -1

    run_on(loop_name, main)
    assert len(app.loops) == 1
    assert issubclass(app.loops[0], LOOP_CLASSES[loop_name])


@pytest.mark.parametrize("loop_name", sorted(LOOPS))
def test_serve_after_a_cancelled_serve_is_stopped_cleanly(loop_name: str) -> None:
    """A serve() task cancelled from its loop closes the socket; a later stop() does not raise."""

    async def main() -> None:
        server, port = create_server(LoopReporter())
        serving = asyncio.create_task(server.serve())
        async with httpx.AsyncClient(timeout=30.0) as client:
            assert (await client.get(f"http://127.0.0.1:{port}/")).status_code == 200
        serving.cancel()
        with pytest.raises(asyncio.CancelledError):
            await serving
        server.stop()
        assert server._socket.fileno() == -1

    run_on(loop_name, main)


@pytest.mark.parametrize("loop_name", sorted(LOOPS))
def test_stop_before_serve_closes_the_socket_and_serve_returns(loop_name: str) -> None:
    """A server stopped before it served closes its socket, and serve() then returns at once."""

    async def main() -> None:
        server, _ = create_server(LoopReporter())
        server.stop()
        assert server._socket.fileno() == -1
        await asyncio.wait_for(server.serve(), 30.0)

    run_on(loop_name, main)


@pytest.mark.parametrize("loop_name", sorted(LOOPS))
def test_start_and_stop_on_a_thread(loop_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """start() serves on its own thread (uvloop when installed, else asyncio); stop() ends it."""
    if loop_name == "asyncio":
        monkeypatch.setitem(sys.modules, "uvloop", None)  # as if uvloop were not installed
    app = LoopReporter()
    server, _ = create_server(app)
    server.start()
    try:
        response = httpx.get(f"{server.url}/", timeout=30.0)
        assert response.status_code == 200
    finally:
        server.stop()
    assert server._thread is not None
    assert not server._thread.is_alive()
    assert server._socket.fileno() == -1
    assert issubclass(app.loops[0], LOOP_CLASSES[loop_name])


def test_context_manager_starts_and_stops() -> None:
    """``with RestServer(app)`` serves inside the block and has stopped after it."""
    with RestServer(LoopReporter()) as server:
        assert httpx.get(f"{server.url}/", timeout=30.0).status_code == 200
    assert server._thread is not None
    assert not server._thread.is_alive()
