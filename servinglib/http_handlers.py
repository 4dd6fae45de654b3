"""A model's custom HTTP handler as a signature: the raw request and response as tensors.

A handler is an ordinary signature (method name :data:`HTTP_HANDLER_METHOD`)
whose inputs are the request (method, path, query, headers, body) and whose
outputs are the response (status, headers, body), so the DataPlane places,
times, bounds and counts it like any call, also in a model process.  Its
signature name carries what the REST front end routes by:
``"http METHOD[,METHOD...] PATH"``.  A streaming handler's first part holds
the status and headers, every later part one chunk of the body.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final, final
from urllib.parse import parse_qsl

import attrs
import numpy as np
import numpy.typing as npt

from servinglib.errors import InternalError
from servinglib.servable import TensorSpec

HTTP_HANDLER_METHOD: Final = "servinglib/http_handler"
"""The method name of every HTTP handler's signature."""

REQUEST_SPECS: Final = (
    TensorSpec("method", object, []),
    TensorSpec("path", object, []),
    TensorSpec("query", object, []),
    TensorSpec("headers", object, [-1, 2]),
    TensorSpec("body", object, []),
)
RESPONSE_SPECS: Final = (
    TensorSpec("status", np.int32, []),
    TensorSpec("headers", object, [-1, 2]),
    TensorSpec("body", object, []),
)

_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_NAME_PREFIX = "http "


@final
@attrs.frozen
class HttpRequest:
    """The raw request a handler gets.

    ``path``: the percent-decoded path below the endpoint's ``/custom``
    (``"/"`` at least); ``query``: the raw query string (no ``?``);
    ``headers``: (lower-case name, value) pairs as sent, latin-1 text;
    ``body``: the body's bytes (a ``Content-Encoding`` already undone).
    Immutable, so thread-safe.
    """

    method: str
    path: str
    query: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    body: bytes = b""

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (any case), or None."""
        wanted = name.lower()
        for key, value in self.headers:
            if key == wanted:
                return value
        return None

    @functools.cached_property
    def query_params(self) -> Mapping[str, str]:
        """The query's parameters, decoded (a repeated one: its last value)."""
        return dict(parse_qsl(self.query, keep_blank_values=True))


@final
@attrs.frozen
class HttpResponse:
    """What a handler answers: status, headers and a body.

    ``body`` is bytes, or, for a handler declared ``streaming=True``, an
    iterable of bytes chunks sent as they come.  ``headers`` are (name,
    value) pairs; ``content-type`` among them sets the body's type
    (default ``application/octet-stream``); the server sets the length.
    Immutable, so thread-safe.
    """

    status: int = 200
    headers: tuple[tuple[str, str], ...] | Mapping[str, str] = ()
    body: bytes | Iterable[bytes] = b""


def handler_name(methods: Iterable[str], path: str) -> str:
    """The signature name of a handler of ``methods`` at ``path``."""
    return f"{_NAME_PREFIX}{','.join(m.upper() for m in methods)} {path}"


@functools.lru_cache(maxsize=1024)
def parse_handler_name(name: str) -> tuple[frozenset[str], str] | None:
    """(methods, path) of a handler's signature name; None for another name."""
    if not name.startswith(_NAME_PREFIX):
        return None
    methods, _, path = name[len(_NAME_PREFIX) :].partition(" ")
    if not path.startswith("/"):
        return None
    return frozenset(methods.split(",")), path


def request_tensors(request: HttpRequest) -> dict[str, npt.NDArray[Any]]:
    """``request`` as the inputs of a handler's signature."""
    headers = np.empty((len(request.headers), 2), dtype=object)
    for row, (name, value) in enumerate(request.headers):
        headers[row, 0] = name.encode("latin-1")
        headers[row, 1] = value.encode("latin-1")
    return {
        "method": _scalar(request.method.encode("latin-1")),
        "path": _scalar(request.path.encode("utf-8")),
        "query": _scalar(request.query.encode("latin-1")),
        "headers": headers,
        "body": _scalar(request.body),
    }


def request_from_tensors(tensors: Mapping[str, npt.NDArray[Any]]) -> HttpRequest:
    """The request the inputs of a handler's signature carry."""
    headers = np.asarray(tensors["headers"], dtype=object).reshape(-1, 2)
    return HttpRequest(
        method=_item(tensors["method"]).decode("latin-1"),
        path=_item(tensors["path"]).decode("utf-8"),
        query=_item(tensors["query"]).decode("latin-1"),
        headers=tuple((_text(n).lower(), _text(v)) for n, v in headers),
        body=_item(tensors["body"]),
    )


def response_tensors(response: object, body: bytes | None = None) -> dict[str, npt.NDArray[Any]]:
    """``response`` (an HttpResponse) as the outputs of a handler's signature.

    ``body``: the body to send instead of ``response.body`` (a stream's
    first part: empty).  InternalError if ``response`` is not an
    HttpResponse, or its status or headers could not be sent.
    """
    if not isinstance(response, HttpResponse):
        raise InternalError(
            f"The HTTP handler returned {type(response).__name__}, not HttpResponse"
        )
    if not 200 <= response.status <= 599:
        raise InternalError(f"The HTTP handler returned status {response.status}, not 200-599")
    pairs = response.headers.items() if isinstance(response.headers, Mapping) else response.headers
    headers = np.empty((len(pairs), 2), dtype=object)
    for row, (name, value) in enumerate(pairs):
        headers[row, 0], headers[row, 1] = _checked_header(str(name), str(value))
    if body is None:
        if not isinstance(response.body, bytes | bytearray | memoryview):
            raise InternalError("The HTTP handler returned a body that is not bytes")
        body = bytes(response.body)
    return {
        "status": np.asarray(response.status, np.int32),
        "headers": headers,
        "body": _scalar(body),
    }


def chunk_tensors(chunk: object) -> dict[str, npt.NDArray[Any]]:
    """One chunk of a streamed body as a part of a handler's stream."""
    if not isinstance(chunk, bytes | bytearray | memoryview):
        raise InternalError(f"The HTTP handler streamed {type(chunk).__name__}, not bytes")
    return {
        "status": np.asarray(0, np.int32),
        "headers": np.empty((0, 2), dtype=object),
        "body": _scalar(bytes(chunk)),
    }


def response_head(
    outputs: Mapping[str, npt.NDArray[Any]],
) -> tuple[int, tuple[tuple[bytes, bytes], ...]]:
    """(status, headers) of a handler's outputs (or a stream's first part)."""
    headers = np.asarray(outputs["headers"], dtype=object).reshape(-1, 2)
    return int(outputs["status"]), tuple((bytes(n), bytes(v)) for n, v in headers)


def response_body(outputs: Mapping[str, npt.NDArray[Any]]) -> bytes:
    """The body (or a stream part's chunk) of a handler's outputs."""
    return _item(outputs["body"])


def _checked_header(name: str, value: str) -> tuple[bytes, bytes]:
    if not _TOKEN.fullmatch(name) or any(c in value for c in "\r\n\0"):
        raise InternalError(f"The HTTP handler returned an invalid header {name[:100]!r}")
    try:
        return name.lower().encode("ascii"), value.encode("latin-1")
    except UnicodeEncodeError:
        raise InternalError(f"Header {name!r}: the value is not latin-1 text") from None


def _scalar(value: bytes) -> npt.NDArray[Any]:
    array = np.empty((), dtype=object)
    array[()] = value
    return array


def _item(array: npt.NDArray[Any]) -> bytes:
    item = np.asarray(array, dtype=object).reshape(-1)[0]
    return item if isinstance(item, bytes) else str(item).encode()


def _text(item: object) -> str:
    return item.decode("latin-1") if isinstance(item, bytes) else str(item)
