"""The one place every RPC passes through: decode, call, map errors, time, report.

Each RPC is an :class:`Rpc`; :func:`method_handler` (grpc.aio) and
:func:`blocking_method_handler` (grpcio's synchronous server) turn it into a method handler:
an undecodable message is INVALID_ARGUMENT, a ServingError its status code, anything else
INTERNAL (logged); one :class:`RpcRecord` goes to the server's observer when the RPC ends.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar, final

import attrs
import grpc
import grpc.aio
from google.protobuf import message as pb_message

from servinglib.errors import (
    InternalError,
    InvalidArgumentError,
    ServingError,
    StatusCode,
    bounded_message,
)
from servinglib.server.grpc._step import Outcome, answer, answer_blocking
from servinglib.server.observe.request_context import (
    begin_request,
    end_request,
    request_id,
    was_logged,
)
from servinglib.server.observe.request_record import RequestObserver, RequestRecord
from servinglib.server.plane.calls_here import unwatch_client, watch_client

if TYPE_CHECKING:
    from servinglib.server.observe.tracing import RequestSpan, Tracing

_log = logging.getLogger("servinglib.server.grpc")

ENTRYPOINT: Final = "GRPC"
"""The ``entrypoint`` of every RpcRecord (REST front ends report theirs)."""

Request = TypeVar("Request", bound=pb_message.Message)
Context = grpc.aio.ServicerContext[Any, Any] | grpc.ServicerContext
"""The servicer context of either server."""
Handler = Callable[[Request, Context], Outcome]
"""A unary RPC's logic, for both servers: its response, or steps leading to it."""
StreamHandler = Callable[
    [Request, grpc.aio.ServicerContext[Any, Any]], AsyncIterator[pb_message.Message]
]
BlockingStreamHandler = Callable[[Request, grpc.ServicerContext], Iterator[pb_message.Message]]

_REQUEST_ID: Final = "x-request-id"
_request_ids = itertools.count(1)
# Failures of the server's or the model's side are logged (as REST logs its 5xx but 503/504).
_LOGGED_CODES: Final = frozenset(
    {StatusCode.INTERNAL, StatusCode.UNKNOWN, StatusCode.DATA_LOSS, StatusCode.UNIMPLEMENTED}
)

_GRPC_CODE: Final[dict[StatusCode, grpc.StatusCode]] = {
    code: grpc.StatusCode[code.name] for code in StatusCode
}


Public = Callable[[ServingError], ServingError]
"""An error as the client may read it (the DataPlane's ``public_error``)."""


def _as_is(error: ServingError) -> ServingError:
    return error


RpcRecord = RequestRecord
"""The record of a finished RPC: :class:`~servinglib.server.observe.request_record.RequestRecord`,
the one record of both front ends (``service`` and ``method`` set, ``status`` 0)."""

RpcObserver = RequestObserver
"""Called once per finished RPC, on the event loop (grpc.aio) or the RPC's worker thread
(the synchronous server); must be quick, thread-safe, and must not raise."""


@final
@attrs.frozen
class Rpc(Generic[Request]):
    """One unary RPC of a service: its wire method name, API name and handler.  Immutable."""

    method: str
    api: str
    request_type: type[Request]
    handler: Handler[Request]
    model_of: Callable[[Request], str] = attrs.field(default=lambda _request: "")


def method_handler(
    service: str,
    rpc: Rpc[Any],
    observer: RpcObserver | None,
    tracing: Tracing | None = None,
    public: Public = _as_is,
) -> grpc.RpcMethodHandler[Any, Any]:
    """A unary-unary handler running ``rpc`` as the module docstring says.

    With ``tracing``, each RPC naming a model gets a span, child of the
    ``traceparent`` in its metadata.
    """
    parse = _parser(rpc.request_type)
    handler = rpc.handler
    model_of = rpc.model_of

    async def call(data: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> bytes:
        start = time.perf_counter()
        model = ""
        code = StatusCode.OK
        span: RequestSpan | None = None
        begin_request(lambda: _request_id_of(context))
        try:
            request = parse(data)
            model = model_of(request)
            if tracing is not None and model:
                span = _start_span(tracing, service, rpc.method, context, start)
            response = await answer(handler(request, context))
            return response.SerializeToString()
        except asyncio.CancelledError:
            code = StatusCode.CANCELLED
            raise
        except Exception as error:
            code, message = _failure(service, rpc, error, public)
            await context.abort(_GRPC_CODE[code], message)
            raise  # unreachable: abort raises
        finally:
            if span is not None:
                span.end(code, rpc__grpc__status_code=code.value)
            if observer is not None:
                _report(observer, service, rpc, model, code=code, start=start)

    return grpc.unary_unary_rpc_method_handler(call)


def blocking_method_handler(
    service: str,
    rpc: Rpc[Any],
    observer: RpcObserver | None,
    tracing: Tracing | None = None,
    public: Public = _as_is,
) -> grpc.RpcMethodHandler[Any, Any]:
    """:func:`method_handler` for grpcio's synchronous server: the same handler, on the
    server's worker thread, each step it waits for called in its blocking form (which
    blocks that thread), the same error mapping and record."""
    parse = _parser(rpc.request_type)
    handler = rpc.handler
    model_of = rpc.model_of

    def call(data: bytes, context: Any) -> bytes:  # noqa: ANN401 - grpc.ServicerContext
        start = time.perf_counter()
        model = ""
        code = StatusCode.OK
        span: RequestSpan | None = None
        request = begin_request(lambda: _request_id_of(context))
        watching = watch_client(context.is_active)
        try:
            message = parse(data)
            model = model_of(message)
            if tracing is not None and model:
                span = _start_span(tracing, service, rpc.method, context, start)
            response = answer_blocking(handler(message, context))
            serialized: bytes = response.SerializeToString()
            return serialized
        except Exception as error:
            code, message = _failure(service, rpc, error, public)
            context.abort(_GRPC_CODE[code], message)
            raise  # unreachable: abort raises
        finally:
            unwatch_client(watching)
            if span is not None:
                span.end(code, rpc__grpc__status_code=code.value)
            if observer is not None:
                _report(observer, service, rpc, model, code=code, start=start)
            end_request(request)

    return grpc.unary_unary_rpc_method_handler(call)


def _failure(
    service: str, rpc: Rpc[Any], error: Exception, public: Public
) -> tuple[StatusCode, str]:
    """The status an RPC failing with ``error`` answers: a ServingError's own, else INTERNAL.

    The message is cut to MAX_MESSAGE_BYTES (past grpc's metadata limit the
    client would get RESOURCE_EXHAUSTED).  Failures of the server's or the
    model's side are logged once, with the request's id.
    """
    if isinstance(error, ServingError):
        if error.code in _LOGGED_CODES and not was_logged(error):
            _log.error("Request %s: %s/%s failed: %s", request_id(), service, rpc.method, error)
        return error.code, bounded_message(public(error).message)
    if not was_logged(error):
        _log.exception("Request %s: %s/%s failed", request_id(), service, rpc.method)
    internal = InternalError(f"{type(error).__name__}: {error}")
    return StatusCode.INTERNAL, bounded_message(public(internal).message)


def _report(
    observer: RpcObserver,
    service: str,
    rpc: Rpc[Any],
    model: str,
    *,
    code: StatusCode,
    start: float,
) -> None:
    observer(
        RequestRecord(
            model_name=model,
            api=rpc.api,
            entrypoint=ENTRYPOINT,
            code=code,
            latency_s=time.perf_counter() - start,
            service=service,
            method=rpc.method,
        )
    )


def _request_id_of(context: Any) -> str:  # noqa: ANN401 - either server's ServicerContext
    """The call's ``x-request-id`` metadata, else ``grpc-<n>``."""
    for key, value in context.invocation_metadata() or ():
        if key == _REQUEST_ID:
            return value if isinstance(value, str) else value.decode("latin-1")
    return f"grpc-{next(_request_ids)}"


def _start_span(
    tracing: Tracing,
    service: str,
    method: str,
    context: Any,  # noqa: ANN401 - either server's ServicerContext
    start: float,
) -> RequestSpan:
    """The RPC's trace span, child of the ``traceparent`` in its metadata (if any)."""
    arrived_ns = time.time_ns() - int((time.perf_counter() - start) * 1e9)
    attributes = {
        "rpc.system": "grpc",
        "rpc.service": service,
        "rpc.method": method,
        "servinglib.entrypoint": ENTRYPOINT,
    }
    metadata = context.invocation_metadata() or ()
    return tracing.start_request(f"{service}/{method}", metadata, attributes, arrived_ns)


def stream_handler(
    request_type: type[Request], handler: StreamHandler[Request]
) -> grpc.RpcMethodHandler[Any, Any]:
    """A unary-stream handler (health Watch): decoding and error mapping as for unary RPCs."""
    parse = _parser(request_type)

    async def call(
        data: bytes, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[bytes]:
        try:
            request = parse(data)
            async for response in handler(request, context):
                yield response.SerializeToString()
        except ServingError as error:
            await context.abort(_GRPC_CODE[error.code], bounded_message(error.message))

    return grpc.unary_stream_rpc_method_handler(call)


def blocking_stream_handler(
    request_type: type[Request], handler: BlockingStreamHandler[Request]
) -> grpc.RpcMethodHandler[Any, Any]:
    """:func:`stream_handler` for grpcio's synchronous server (a generator on its worker thread)."""
    parse = _parser(request_type)

    def call(data: bytes, context: grpc.ServicerContext) -> Iterator[bytes]:
        try:
            request = parse(data)
            for response in handler(request, context):
                yield response.SerializeToString()
        except ServingError as error:
            context.abort(_GRPC_CODE[error.code], bounded_message(error.message))

    return grpc.unary_stream_rpc_method_handler(call)


def _parser(request_type: type[Request]) -> Callable[[bytes], Request]:
    name = request_type.DESCRIPTOR.name
    from_string = request_type.FromString

    def parse(data: bytes) -> Request:
        try:
            return from_string(data)
        except pb_message.DecodeError as error:
            raise InvalidArgumentError(f"Cannot decode the {name}: {error}") from None

    return parse
