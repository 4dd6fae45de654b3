"""``@http_handler``: a PythonModel method answering raw HTTP requests (custom endpoints).

The decorated method takes an :class:`~servinglib.http_handlers.HttpRequest`
and returns an :class:`~servinglib.http_handlers.HttpResponse`; it is
declared as a signature (:mod:`servinglib.http_handlers`) so the server
calls it as any thread-mode signature: deadlines, the in-flight bound,
statistics and request logging apply.  The REST server mounts it below
``/v1/models/{model}[/versions/{v}|/labels/{l}]/custom``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy.typing as npt

from servinglib.errors import InvalidArgumentError
from servinglib.http_handlers import (
    HTTP_HANDLER_METHOD,
    REQUEST_SPECS,
    RESPONSE_SPECS,
    HttpRequest,
    HttpResponse,
    chunk_tensors,
    handler_name,
    request_from_tensors,
    response_tensors,
)
from servinglib.loaders.python import signature

Handler = Callable[[Any, HttpRequest], HttpResponse]


def http_handler(
    *, path: str = "/", methods: Sequence[str] = ("POST",), streaming: bool = False
) -> Callable[[Handler], Callable[..., Any]]:
    """Declares a PythonModel method ``(self, request) -> HttpResponse`` as an HTTP handler.

    ``path``: the requests it takes, below the model's ``/custom``: that
    path and every path under it (the longest declared path wins; ``"/"``:
    all).  ``methods``: the HTTP methods it takes (another is a 405).
    ``streaming``: the response's body is an iterable of bytes chunks, each
    sent as it comes (the deadline bounds the whole stream).
    Requires: ``path`` starts with ``/`` and holds no space; methods are
    upper-case HTTP method names.  The method replaced by the decorator
    is called by the server only.
    """
    if not path.startswith("/") or " " in path or "\0" in path:
        raise InvalidArgumentError(f"HTTP handler path {path!r}: must start with / (no spaces)")
    upper = [m.upper() for m in methods]
    if not upper or any(not m.isascii() or not m.isalpha() for m in upper):
        raise InvalidArgumentError(f"HTTP handler methods {list(methods)!r}: HTTP method names")
    name = handler_name(upper, path.rstrip("/") or "/")
    declare = signature(
        inputs=REQUEST_SPECS, outputs=RESPONSE_SPECS, name=name, method_name=HTTP_HANDLER_METHOD
    )

    def mark(handler: Handler) -> Callable[..., Any]:
        if streaming:

            def stream(self: Any, **tensors: npt.NDArray[Any]) -> Iterator[dict[str, Any]]:  # noqa: ANN401 - the model
                response = handler(self, request_from_tensors(tensors))
                yield response_tensors(response, body=b"")
                chunks = response.body
                if isinstance(chunks, bytes | bytearray):
                    chunks = [bytes(chunks)]
                for chunk in chunks:
                    yield chunk_tensors(chunk)

            return declare(_named(stream, handler))

        def answer(self: Any, **tensors: npt.NDArray[Any]) -> dict[str, Any]:  # noqa: ANN401 - the model
            return response_tensors(handler(self, request_from_tensors(tensors)))

        return declare(_named(answer, handler))

    return mark


def _named(wrapper: Callable[..., Any], handler: Handler) -> Callable[..., Any]:
    wrapper.__name__ = getattr(handler, "__name__", wrapper.__name__)
    wrapper.__qualname__ = getattr(handler, "__qualname__", wrapper.__qualname__)
    wrapper.__doc__ = handler.__doc__
    return wrapper
