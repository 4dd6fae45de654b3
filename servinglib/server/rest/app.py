"""RestApp: the ASGI application serving TF Serving's REST API and KServe V2 on one ServerCore."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
import warnings
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any, final

import attrs

from servinglib.errors import (
    InternalError,
    ServingError,
    StatusCode,
    UnavailableError,
    bounded_message,
)
from servinglib.server.auth.api_groups import REST_API_GROUPS
from servinglib.server.management.model_management import ModelManagement
from servinglib.server.observe.request_context import begin_request, was_logged
from servinglib.server.observe.request_context import request_id as current_request_id
from servinglib.server.observe.request_record import RequestObserver, RequestRecord
from servinglib.server.plane.data_plane import DataPlane
from servinglib.server.rest import json_codec
from servinglib.server.rest.content_encoding import (
    DecodedTooLargeError,
    UnsupportedEncodingError,
    decode_body,
)
from servinglib.server.rest.custom_http import CustomHttpApi
from servinglib.server.rest.exchange import BodyStream, RestRequest, RestResponse
from servinglib.server.rest.generate import GenerateApi
from servinglib.server.rest.kserve_v2 import KServeV2Api
from servinglib.server.rest.options import RestOptions
from servinglib.server.rest.restricted import check_headers
from servinglib.server.rest.router import Route, Router, below_root
from servinglib.server.rest.tf_serving import TfServingApi
from servinglib.server.server_core import ServerCore

if TYPE_CHECKING:
    from servinglib.server.observe.tracing import RequestSpan

_log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

ENTRYPOINT = "REST"
_CORS_HEADERS = (
    (b"access-control-allow-origin", b"*"),
    (b"access-control-allow-methods", b"POST, GET"),
    (b"access-control-allow-headers", b"Content-Type"),
)
_REQUEST_ID = b"x-request-id"


@final
class RestApp:
    """An ASGI 3 application: TF Serving's REST API, KServe V2, model listing and health.

    Every request passes through one method, which maps errors to
    ``{"error": message}`` bodies with their code's HTTP status, refuses
    requests of a restricted API group without its credential (401, or 403
    for another value) before their body is read, answers 413 for bodies over
    ``max_request_body_bytes``, logs 5xx failures (but 503 and 504) once with
    a request id, and reports a :class:`RequestRecord` to ``on_request``.
    :meth:`close` stops the DataPlane if the app created it.
    Paths are routed below the ASGI ``root_path`` (it serves mounted under a
    prefix).
    Thread-safe: holds no per-request state; mount it on any ASGI server.
    """

    def __init__(
        self,
        target: DataPlane | ServerCore,
        options: RestOptions | None = None,
        *,
        on_request: RequestObserver | None = None,
        management: ModelManagement | None = None,
    ) -> None:
        self._owns_plane = not isinstance(target, DataPlane)
        self._plane = target if isinstance(target, DataPlane) else DataPlane(target)
        self._options = options or RestOptions()
        self._tfs = TfServingApi(self._plane)
        self._router = Router(
            self._tfs,
            KServeV2Api(self._plane, self._options, management),
            GenerateApi(self._plane),
            CustomHttpApi(self._plane, _credential_headers(self._options)),
        )
        self._on_request = on_request
        self._timeout_s = self._options.request_timeout_s
        self._max_body = self._options.max_request_body_bytes
        cors = self._options.enable_cors_support
        self._extra_headers = _cors_headers(self._options) if cors else ()
        self._request_ids = itertools.count(1)
        self._tracing = self._plane.tracing
        self._restricted = self._options.restricted_apis.by_api(REST_API_GROUPS)

    @property
    def options(self) -> RestOptions:
        """The options the app was made with."""
        return self._options

    @property
    def plane(self) -> DataPlane:
        """The DataPlane model calls go through."""
        return self._plane

    def close(self) -> None:
        """Stops the DataPlane (its pool, its following of the core) if the app made it."""
        if self._owns_plane:
            self._plane.close()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The ASGI entry point: HTTP and lifespan scopes (others are closed at once)."""
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "lifespan":
            await _lifespan(receive, send)
        elif kind == "websocket":
            await send({"type": "websocket.close", "code": 1003})

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The one place every request passes: route, read, handle, map errors, record."""
        started = time.perf_counter()
        method: str = scope["method"]
        raw_path: bytes = scope.get("raw_path") or scope["path"].encode("utf-8")
        path = raw_path.split(b"?", 1)[0].decode("latin-1")
        root_path: str | None = scope.get("root_path")
        if root_path:  # mounted under a prefix, e.g. app.mount("/serving", rest_app)
            path = below_root(path, root_path)
        route: Route | None = None
        span: RequestSpan | None = None
        code = StatusCode.OK
        begin_request(lambda: _header(scope, _REQUEST_ID) or f"rest-{next(self._request_ids)}")
        try:
            if method == "OPTIONS" and self._extra_headers:
                response = RestResponse(204, b"")
            else:
                route = self._router.match(method, path)
                if self._restricted and route.api in self._restricted:
                    check_headers(self._restricted[route.api], scope["headers"])
                if self._tracing is not None and route.model_name:
                    span = self._start_span(scope, method, path, route, started)
                if route.label is not None:
                    self._check_label(route)
                body = await self._read_body(scope, receive)
                deadline = time.monotonic() + self._timeout_s if self._timeout_s else None
                response = await route.handler(
                    RestRequest(
                        route.model_name,
                        route.version,
                        route.label,
                        body,
                        tuple(scope["headers"]),
                        deadline,
                        route.model_spec,
                        scope.get("query_string", b""),
                    )
                )
        except (_BodyTooLarge, DecodedTooLargeError) as error:
            code = StatusCode.RESOURCE_EXHAUSTED
            response = RestResponse(
                413, _error_body(str(error)), headers=((b"connection", b"close"),)
            )
        except UnsupportedEncodingError as error:
            code = StatusCode.INVALID_ARGUMENT
            response = RestResponse(415, _error_body(str(error)))
        except ServingError as error:
            code = error.code
            response = RestResponse.error(self._plane.public_error(error))
            if response.status >= 500 and response.status not in (503, 504):
                response = self._log_failure(scope, method, path, error, response)
        except asyncio.CancelledError:
            # The server's shutdown grace ended (uvicorn cancels what still runs): a JSON 503,
            # not uvicorn's plain-text 500. The request ends here, so nothing is left to cancel.
            code = StatusCode.UNAVAILABLE
            response = RestResponse.error(
                UnavailableError("The server is shutting down: the request was cut off")
            )
        except Exception as error:  # noqa: BLE001 - a model's own exception is a 500, never a crash
            code = StatusCode.INTERNAL
            wrapped = self._plane.public_error(InternalError(f"{type(error).__name__}: {error}"))
            response = self._log_failure(scope, method, path, error, RestResponse.error(wrapped))
        await self._finish(
            send, receive, response, code=code, span=span, route=route, started=started
        )

    async def _finish(
        self,
        send: Send,
        receive: Receive,
        response: RestResponse,
        *,
        code: StatusCode,
        span: RequestSpan | None,
        route: Route | None,
        started: float,
    ) -> None:
        """Sends ``response`` (or its stream), ends the request's span, reports its record."""
        if response.stream is None:
            await self._send(send, response)  # uvicorn drops a response to a client gone
        else:
            code = await self._send_stream(send, receive, response, response.stream)
        if span is not None:
            span.end(code, http__response__status_code=response.status)
        # Metrics hook: the one place that knows model, API, entrypoint, status and latency.
        if self._on_request is not None:
            self._on_request(
                RequestRecord(
                    model_name=route.model_name if route is not None else "",
                    api=route.api if route is not None else "unknown",
                    entrypoint=ENTRYPOINT,
                    code=code,
                    latency_s=time.perf_counter() - started,
                    status=response.status,
                )
            )

    def _start_span(
        self, scope: Scope, method: str, path: str, route: Route, started: float
    ) -> RequestSpan:
        """The request's trace span, child of the client's ``traceparent`` header (if any)."""
        assert self._tracing is not None
        arrived_ns = time.time_ns() - int((time.perf_counter() - started) * 1e9)
        attributes = {
            "http.request.method": method,
            "url.path": path[:200],
            "servinglib.api": route.api,
            "servinglib.entrypoint": ENTRYPOINT,
        }
        return self._tracing.start_request(
            f"{method} {route.api}", scope["headers"], attributes, arrived_ns
        )

    def _check_label(self, route: Route) -> None:
        """A label the core does not know fails before the body is read, as the core says."""
        assert route.label is not None
        self._plane.questions.label_version(route.model_name, route.label)

    async def _read_body(self, scope: Scope, receive: Receive) -> bytes:
        limit = self._max_body
        for name, value in scope["headers"]:
            if name == b"content-length" and value.isdigit() and int(value) > limit:
                raise _BodyTooLarge(limit)
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break  # http.disconnect: answer what arrived; the server drops the reply
            chunk: bytes = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise _BodyTooLarge(limit)
            if not message.get("more_body", False):
                if not chunks:
                    return self._decoded(scope, chunk)
                chunks.append(chunk)
                break
            chunks.append(chunk)
        body = b"".join(chunks)
        return self._decoded(scope, body)

    def _decoded(self, scope: Scope, body: bytes) -> bytes:
        """``body`` with its ``Content-Encoding`` undone (gzip, deflate), within the limit."""
        for name, value in scope["headers"]:
            if name == b"content-encoding":
                return decode_body(body, value.decode("latin-1"), self._max_body)
        return body

    def _log_failure(
        self, scope: Scope, method: str, path: str, error: BaseException, response: RestResponse
    ) -> RestResponse:
        request_id = current_request_id() or f"rest-{next(self._request_ids)}"
        if not was_logged(error):  # a model's exception: the DataPlane logged its traceback
            _log.error(
                "Request %s (%s %s) failed: %s",
                request_id,
                method,
                path[:200],
                error,
                exc_info=not isinstance(error, ServingError),
                extra={"request_id": request_id},
            )
        return attrs.evolve(
            response, headers=(*response.headers, (_REQUEST_ID, request_id.encode("latin-1")))
        )

    async def _send(self, send: Send, response: RestResponse) -> None:
        headers = [
            (b"content-type", response.content_type),
            (b"content-length", str(len(response.body)).encode("ascii")),
            *response.headers,
            *self._extra_headers,
        ]
        await send({"type": "http.response.start", "status": response.status, "headers": headers})
        await send({"type": "http.response.body", "body": response.body})

    async def _send_stream(
        self, send: Send, receive: Receive, response: RestResponse, body: BodyStream
    ) -> StatusCode:
        """Sends a body chunk by chunk until it ends or the client leaves; the outcome's code."""
        headers = [(b"content-type", response.content_type), *response.headers]
        headers.extend(self._extra_headers)
        pump = asyncio.ensure_future(_pump(send, response.status, headers, body))
        left = asyncio.ensure_future(_disconnected(receive))
        try:
            await asyncio.wait((pump, left), return_when=asyncio.FIRST_COMPLETED)
        finally:
            pump.cancel()
            left.cancel()
            await asyncio.gather(pump, left, return_exceptions=True)
            await body.aclose()
        if pump.cancelled() or pump.exception() is not None:
            return StatusCode.CANCELLED  # the client left (or the server stopped) mid-stream
        return body.code


async def _pump(
    send: Send, status: int, headers: list[tuple[bytes, bytes]], body: BodyStream
) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers})
    async with contextlib.aclosing(body.chunks()) as chunks:
        async for chunk in chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b""})


async def _disconnected(receive: Receive) -> None:
    """Returns when the client disconnects (the request's body was read before)."""
    while (await receive())["type"] != "http.disconnect":
        pass


class _BodyTooLarge(Exception):  # noqa: N818 - an HTTP outcome (413), not a serving error
    def __init__(self, limit: int) -> None:
        super().__init__(f"The request body is larger than the limit of {limit} bytes")


def _cors_headers(options: RestOptions) -> tuple[tuple[bytes, bytes], ...]:
    """The CORS headers, letting browsers send the restricted groups' credential headers too."""
    keys = sorted({r.key for r in options.restricted_apis.restrictions})
    if not keys:
        return _CORS_HEADERS
    allowed = ", ".join(["Content-Type", *keys]).encode("latin-1")
    return (*_CORS_HEADERS[:2], (b"access-control-allow-headers", allowed))


def _credential_headers(options: RestOptions) -> frozenset[bytes]:
    """The headers carrying the restricted groups' credentials (kept from custom handlers)."""
    return frozenset(r.key.encode("latin-1") for r in options.restricted_apis.restrictions)


def _error_body(message: str) -> bytes:
    return json_codec.dumps({"error": bounded_message(message)})


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            text: str = value.decode("latin-1")[:100]
            return text
    return None


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def create_app(
    target: DataPlane | ServerCore,
    options: RestOptions | None = None,
    *,
    on_request: RequestObserver | None = None,
    plane: DataPlane | None = None,
    management: ModelManagement | None = None,
) -> RestApp:
    """The REST app serving ``target``: TF Serving's REST API, KServe V2, listing and health.

    ``target``: the DataPlane every request goes through (share one with the
    gRPC server), or a ServerCore, for which the app makes its own (stopped by
    :meth:`RestApp.close`).  ``on_request``: called with a RequestRecord after
    each response.  ``management``: whether the V2 repository load and unload
    may change what is served (default: off).  ``plane``: deprecated; pass
    the DataPlane as ``target``.
    """
    if plane is not None:
        warnings.warn(
            "create_app(core, plane=plane) is deprecated: pass the DataPlane itself, "
            "create_app(plane)",
            DeprecationWarning,
            stacklevel=2,
        )
        target = plane
    return RestApp(target, options, on_request=on_request, management=management)
