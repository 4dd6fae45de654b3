"""Custom HTTP endpoints: ``/v1/models/{m}[/versions/{v}|/labels/{l}]/custom/...`` to a handler.

Translates the raw request into the inputs of the model's HTTP handler
signature (:mod:`servinglib.http_handlers`), calls it through the DataPlane
as any signature, and its outputs into the response, streamed when the
handler streams.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Collection, Mapping
from typing import Any, Final, final

import numpy.typing as npt

from servinglib.errors import NotFoundError, ServingError
from servinglib.http_handlers import (
    HTTP_HANDLER_METHOD,
    HttpRequest,
    parse_handler_name,
    request_tensors,
    response_body,
    response_head,
)
from servinglib.servable import SignatureSpec
from servinglib.server.plane.data_plane import DataPlane
from servinglib.server.plane.streaming import InferenceStream
from servinglib.server.rest import json_codec
from servinglib.server.rest.exchange import BodyStream, RestRequest, RestResponse

OCTET_STREAM: Final = b"application/octet-stream"
# Set by the server from the body it sends; a handler's own would contradict it.
_SERVER_HEADERS: Final = frozenset({b"content-length", b"transfer-encoding", b"connection"})


@final
class CustomHttpApi:
    """Calls a model's HTTP handlers over a DataPlane.

    ``hidden_headers``: request headers the handler does not see (the
    credentials of restricted API groups).  Thread-safe: stateless.
    """

    def __init__(self, plane: DataPlane, hidden_headers: Collection[bytes] = ()) -> None:
        self._plane = plane
        self._hidden = frozenset(hidden_headers)

    async def handle(self, method: str, path: str, request: RestRequest) -> RestResponse:
        """Answers ``method`` on ``path`` (decoded, below ``/custom``) with the handler of it.

        404 when no handler's path holds ``path``, 405 (with ``Allow``) when
        the handler takes another method; a handler's failure is its error
        (a 500 for its own exception).
        """
        await self._plane.loaded(request.model_spec(), deadline=request.deadline)
        spec, signatures = self._plane.signatures(request.model_spec())
        found = _handler_of(signatures, path)
        if found is None:
            raise NotFoundError(
                f"Model {spec.name} version {spec.version} has no HTTP handler of {path[:200]}"
            )
        name, methods, streaming = found
        if method not in methods:
            allow = ", ".join(sorted(methods)).encode("ascii")
            message = f"The HTTP handler of {path[:200]} takes {allow.decode()}, not {method}"
            return RestResponse(
                405, json_codec.dumps({"error": message}), headers=((b"allow", allow),)
            )
        inputs = request_tensors(
            HttpRequest(
                method=method,
                path=path,
                query=request.query.decode("latin-1"),
                headers=tuple(
                    (n.decode("latin-1"), v.decode("latin-1"))
                    for n, v in request.headers
                    if n not in self._hidden
                ),
                body=request.body,
            )
        )
        if not streaming:
            result = await self._plane.infer(spec, name, inputs, deadline=request.deadline)
            return _response(result.outputs, response_body(result.outputs))
        stream = self._plane.open_stream(spec, name, inputs, deadline=request.deadline)
        try:
            head = await anext(stream)
        except BaseException:
            await stream.aclose()
            raise
        return _response(head, b"", _Chunks(stream))


def _handler_of(
    signatures: Mapping[str, SignatureSpec], path: str
) -> tuple[str, frozenset[str], bool] | None:
    """(signature name, methods, streaming) of the handler whose path is the longest holding
    ``path``; None when none holds it."""
    best: tuple[str, frozenset[str], bool] | None = None
    best_length = -1
    for name, spec in signatures.items():
        if spec.method_name != HTTP_HANDLER_METHOD:
            continue
        parsed = parse_handler_name(name)
        if parsed is None:
            continue
        methods, prefix = parsed
        holds = prefix in ("/", path) or path.startswith(prefix + "/")
        if holds and len(prefix) > best_length:
            best, best_length = (name, methods, spec.streaming), len(prefix)
    return best


def _response(
    head: Mapping[str, npt.NDArray[Any]], body: bytes, stream: BodyStream | None = None
) -> RestResponse:
    status, headers = response_head(head)
    content_type = OCTET_STREAM
    kept: list[tuple[bytes, bytes]] = []
    for name, value in headers:
        if name == b"content-type":
            content_type = value
        elif name not in _SERVER_HEADERS:
            kept.append((name, value))
    return RestResponse(status, body, content_type, tuple(kept), stream=stream)


@final
class _Chunks(BodyStream):
    """A streaming handler's parts after its first, one body chunk each.

    A failure after the first part ends the body early (its status was
    sent); the request's record carries the failure's code.
    """

    def __init__(self, stream: InferenceStream) -> None:
        super().__init__()
        self._stream = stream

    async def chunks(self) -> AsyncGenerator[bytes, None]:
        try:
            async for part in self._stream:
                chunk = response_body(part)
                if chunk:
                    yield chunk
        except ServingError as error:
            self.code = error.code

    async def aclose(self) -> None:
        await self._stream.aclose()
