"""The request a log line is about: its id, carried by a context variable on either front end."""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable
from typing import Final, final

from servinglib.errors import ServingError

_log = logging.getLogger("servinglib.server.plane.data_plane")

_LOGGED: Final = "_servinglib_logged"


@final
class _RequestId:
    """An id computed once, on first use.  Used by one request's task only."""

    __slots__ = ("_make", "_value")

    def __init__(self, make: Callable[[], str]) -> None:
        self._make = make
        self._value: str | None = None

    @property
    def value(self) -> str:
        if self._value is None:
            self._value = self._make()
        return self._value


_CURRENT: contextvars.ContextVar[_RequestId | None] = contextvars.ContextVar(
    "servinglib_request_id", default=None
)


RequestToken = contextvars.Token[_RequestId | None]
"""What :func:`begin_request` returns and :func:`end_request` takes."""


def begin_request(make_id: Callable[[], str]) -> RequestToken:
    """Marks the current task as serving a request whose id ``make_id()`` gives when asked.

    Requires: called in the request's own task (each ASGI request and each
    grpc.aio RPC runs in one), or on a server thread that calls
    :func:`end_request` with the token when the request ends, so the id
    does not leak to other requests.
    """
    return _CURRENT.set(_RequestId(make_id))


def end_request(token: RequestToken) -> None:
    """Ends what :func:`begin_request` started on a thread that serves one request after another.

    Important: a synchronous server's worker thread must call it, or its
    context keeps the finished request's ``make_id`` (and what it holds: the
    RPC's context) until the thread's next request: grpcio then counts that
    RPC's stream as open, and refuses new streams on the connection
    (REFUSED_STREAM) once its worker threads each hold one.
    """
    _CURRENT.reset(token)


def request_id() -> str | None:
    """The id of the request the current task serves, or None outside a request."""
    current = _CURRENT.get()
    return None if current is None else current.value


def mark_logged(error: BaseException) -> None:
    """Notes that ``error``'s traceback was logged with its request, so no one logs it again."""
    setattr(error, _LOGGED, True)


def was_logged(error: BaseException) -> bool:
    """True if :func:`mark_logged` saw ``error``."""
    return getattr(error, _LOGGED, False) is True


def log_model_failure(error: BaseException, model_name: str, version: int, signature: str) -> None:
    """Logs, once, the traceback of an exception the model raised (wrapped or not).

    A ServingError raised on purpose (bad input, deadline) is no model
    failure and is not logged; one wrapping a foreign exception (a Python
    model's ``raise``) is, with the foreign exception's traceback, so the
    model's author sees the line of ``model.py`` that raised.  The line
    names the request id, model, version and signature.
    """
    cause = error if not isinstance(error, ServingError) else error.__cause__
    if cause is None or isinstance(cause, ServingError) or was_logged(error):
        return
    rid = request_id()
    _log.error(
        "Request %s: model %s version %d signature %s raised %s: %s",
        rid or "-",
        model_name,
        version,
        signature,
        type(cause).__name__,
        cause,
        exc_info=(type(cause), cause, cause.__traceback__),
        extra={"request_id": rid, "model": model_name, "version": version},
    )
    mark_logged(error)
