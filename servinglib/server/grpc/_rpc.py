"""The one place every RPC passes through: decode, call, map errors, time, report.

Each RPC is described by an :class:`Rpc` (wire method, API name, request
class, handler, how to read the model name).  :func:`method_handler` turns it
into a grpc method handler that takes the raw request bytes, so that an
undecodable message becomes INVALID_ARGUMENT (grpc's own deserializer would
answer INTERNAL), every ServingError becomes its status code, and anything
else becomes INTERNAL, logged.  When the RPC ends, one :class:`RpcRecord`
(model, API, entrypoint, code, latency) goes to the server's observer: the
hook request metrics attach to.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar, final

import attrs
import grpc
import grpc.aio
from google.protobuf import message as pb_message

from servinglib.errors import InvalidArgumentError, ServingError, StatusCode
from servinglib.server.plane.request_record import RequestObserver, RequestRecord

if TYPE_CHECKING:
    from servinglib.server.plane.tracing import RequestSpan, Tracing

_log = logging.getLogger("servinglib.server.grpc")

ENTRYPOINT: Final = "GRPC"
"""The ``entrypoint`` of every RpcRecord (REST front ends report theirs)."""

Request = TypeVar("Request", bound=pb_message.Message)
Handler = Callable[[Request, grpc.aio.ServicerContext[Any, Any]], Awaitable[pb_message.Message]]
StreamHandler = Callable[
    [Request, grpc.aio.ServicerContext[Any, Any]], AsyncIterator[pb_message.Message]
]

_GRPC_CODE: Final[dict[StatusCode, grpc.StatusCode]] = {
    code: grpc.StatusCode[code.name] for code in StatusCode
}


RpcRecord = RequestRecord
"""The record of a finished RPC: :class:`~servinglib.server.plane.request_record.RequestRecord`,
the one record of both front ends (``service`` and ``method`` set, ``status`` 0)."""

RpcObserver = RequestObserver
"""Called once per finished RPC, on the event loop; must be quick and must not raise."""


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
    service: str, rpc: Rpc[Any], observer: RpcObserver | None, tracing: Tracing | None = None
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
        try:
            request = parse(data)
            model = model_of(request)
            if tracing is not None and model:
                span = _start_span(tracing, service, rpc.method, context, start)
            response = await handler(request, context)
            return response.SerializeToString()
        except ServingError as error:
            code = error.code
            await context.abort(_GRPC_CODE[code], error.message)
            raise  # unreachable: abort raises
        except asyncio.CancelledError:
            code = StatusCode.CANCELLED
            raise
        except Exception as error:
            code = StatusCode.INTERNAL
            _log.exception("%s/%s failed", service, rpc.method)
            await context.abort(grpc.StatusCode.INTERNAL, f"{type(error).__name__}: {error}")
            raise  # unreachable: abort raises
        finally:
            if span is not None:
                span.end(code, rpc__grpc__status_code=code.value)
            if observer is not None:
                latency = time.perf_counter() - start
                observer(
                    RequestRecord(
                        model_name=model,
                        api=rpc.api,
                        entrypoint=ENTRYPOINT,
                        code=code,
                        latency_s=latency,
                        service=service,
                        method=rpc.method,
                    )
                )

    return grpc.unary_unary_rpc_method_handler(call)


def _start_span(
    tracing: Tracing,
    service: str,
    method: str,
    context: grpc.aio.ServicerContext[Any, Any],
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
            await context.abort(_GRPC_CODE[error.code], error.message)

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
