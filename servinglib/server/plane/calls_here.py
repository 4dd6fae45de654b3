"""Server threads: what a synchronous server's worker thread tells the calls it runs."""

from __future__ import annotations

import contextvars
from collections.abc import Callable

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
