"""The gRPC side of restricted API groups: an RPC's metadata checked before its handler runs."""

from __future__ import annotations

import inspect
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any, Final

import grpc
import grpc.aio

from servinglib.errors import ServingError, StatusCode
from servinglib.server.auth.api_groups import GRPC_METHOD_GROUPS
from servinglib.server.auth.restricted_apis import RestrictedApis
from servinglib.server.observe.request_record import RequestObserver, RequestRecord

Handlers = dict[str, dict[str, "grpc.RpcMethodHandler[Any, Any]"]]
"""Method handlers by service, then method."""

_KINDS: Final = ("unary_unary", "unary_stream", "stream_unary", "stream_stream")


def restrict(
    handlers: Handlers, restricted: RestrictedApis, observer: RequestObserver | None
) -> None:
    """Puts the check of each restricted method's credential in front of its handler, in place.

    A refused RPC ends UNAUTHENTICATED or PERMISSION_DENIED before its
    request is read or its handler runs, and is reported to ``observer``
    (no model name).  Raises KeyError for a method no API group holds
    (every method served must be in ``GRPC_METHOD_GROUPS``).
    """
    groups = {name: GRPC_METHOD_GROUPS[name] for name in _names(handlers)}
    locked = restricted.by_api(groups)
    for service, methods in handlers.items():
        for method, handler in methods.items():
            found = locked.get(f"{service}/{method}")
            if found is None:
                continue
            group, restriction = found

            def check(metadata: Any, group: Any = group, restriction: Any = restriction) -> None:  # noqa: ANN401 - either server's metadata
                restriction.check(group, _value(metadata, restriction.key))

            report = _reporter(observer, service, method)
            methods[method] = _guarded(handler, check, report)


def _names(handlers: Handlers) -> list[str]:
    return [f"{service}/{method}" for service, methods in handlers.items() for method in methods]


def _value(metadata: Any, key: str) -> bytes | None:  # noqa: ANN401 - either server's metadata
    """The first value of ``key`` in a call's metadata, as bytes; None when absent."""
    for name, value in metadata or ():
        if name == key:
            return value.encode("utf-8") if isinstance(value, str) else bytes(value)
    return None


Report = Callable[[StatusCode, float], None]


def _reporter(observer: RequestObserver | None, service: str, method: str) -> Report:
    def report(code: StatusCode, start: float) -> None:
        if observer is not None:
            observer(
                RequestRecord(
                    model_name="",
                    api=method,
                    entrypoint="GRPC",
                    code=code,
                    latency_s=time.perf_counter() - start,
                    service=service,
                    method=method,
                )
            )

    return report


def _guarded(
    handler: grpc.RpcMethodHandler[Any, Any],
    check: Callable[[Any], None],
    report: Report,
) -> grpc.RpcMethodHandler[Any, Any]:
    """``handler`` with ``check`` (raising a ServingError) run on the metadata first."""
    kind = next(kind for kind in _KINDS if getattr(handler, kind) is not None)
    behaviour = getattr(handler, kind)
    make = getattr(grpc, f"{kind}_rpc_method_handler")
    guarded: grpc.RpcMethodHandler[Any, Any] = make(
        _wrapped(behaviour, check, report),
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )
    return guarded


def _wrapped(behaviour: Any, check: Callable[[Any], None], report: Report) -> Any:  # noqa: ANN401 - a handler's behaviour, of any of the four shapes on either server
    """The same shape of behaviour as ``behaviour`` (function, generator, coroutine,
    async generator), refusing the RPC when ``check`` raises."""

    def refusal(context: Any) -> tuple[grpc.StatusCode, str] | None:  # noqa: ANN401
        start = time.perf_counter()
        try:
            check(context.invocation_metadata())
        except ServingError as error:
            report(error.code, start)
            return grpc.StatusCode[error.code.name], error.message
        return None

    if inspect.isasyncgenfunction(behaviour):

        async def async_stream(request: Any, context: Any) -> AsyncIterator[Any]:  # noqa: ANN401
            refused = refusal(context)
            if refused is not None:
                await context.abort(*refused)
            async for response in behaviour(request, context):
                yield response

        return async_stream
    if inspect.iscoroutinefunction(behaviour):

        async def coroutine(request: Any, context: Any) -> Any:  # noqa: ANN401
            refused = refusal(context)
            if refused is not None:
                await context.abort(*refused)
            return await behaviour(request, context)

        return coroutine
    if inspect.isgeneratorfunction(behaviour):

        def stream(request: Any, context: Any) -> Iterator[Any]:  # noqa: ANN401
            refused = refusal(context)
            if refused is not None:
                context.abort(*refused)
            yield from behaviour(request, context)

        return stream

    def function(request: Any, context: Any) -> Any:  # noqa: ANN401
        refused = refusal(context)
        if refused is not None:
            context.abort(*refused)
        return behaviour(request, context)

    return function
