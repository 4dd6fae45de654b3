"""Server threads: what a synchronous server's worker thread tells the calls it runs."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Coroutine
from typing import Any, Final, TypeVar

T = TypeVar("T")

_get_running_loop: Final = asyncio._get_running_loop  # noqa: SLF001 - the one check without a raise


_CLIENT_ACTIVE: contextvars.ContextVar[Callable[[], bool] | None] = contextvars.ContextVar(
    "servinglib_client_active", default=None
)


def watch_client(active: Callable[[], bool]) -> contextvars.Token[Callable[[], bool] | None]:
    """Tells calls run on this server thread how to ask whether their client is still there
    (grpcio's ``context.is_active``); give the token to :func:`unwatch_client` when the RPC ends.

    A call waiting for a place in its model's share asks it as it waits, and
    gives up with CANCELLED once the client has gone.
    """
    return _CLIENT_ACTIVE.set(active)


def unwatch_client(token: contextvars.Token[Callable[[], bool] | None]) -> None:
    """Ends what :func:`watch_client` started (server threads serve one RPC after another)."""
    _CLIENT_ACTIVE.reset(token)


def client_watch() -> Callable[[], bool] | None:
    """How calls on this server thread ask whether their client is still there (None: they
    cannot: not a server thread, or a server that does not say)."""
    return _CLIENT_ACTIVE.get()


def on_server_thread() -> bool:
    """True when no event loop runs on this thread: a coroutine must complete without suspending."""
    return _get_running_loop() is None


def run_to_completion(coroutine: Coroutine[Any, Any, T]) -> T:
    """Runs a coroutine that never suspends (a handler over the DataPlane on a server thread).

    Raises RuntimeError (after closing the coroutine) if it suspends: it
    awaited something only an event loop can complete.
    """
    try:
        coroutine.send(None)
    except StopIteration as done:
        result: T = done.value
        return result
    coroutine.close()
    raise RuntimeError("a handler awaited an event loop on a server thread")


async def off_loop(function: Callable[..., T], *args: Any) -> T:  # noqa: ANN401 - function's args
    """``function(*args)`` on a worker thread under an event loop; here, on a server thread."""
    if on_server_thread():
        return function(*args)
    return await asyncio.to_thread(function, *args)
