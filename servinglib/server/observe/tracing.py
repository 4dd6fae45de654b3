"""Tracing: OpenTelemetry spans for requests, their queueing, batching and model calls.

Optional (the ``tracing`` extra), imported only when tracing is turned on.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any, final

from servinglib._install import install_hint
from servinglib.errors import FailedPreconditionError, InvalidArgumentError, StatusCode
from servinglib.servable import CallStages
from servinglib.server.observe.call_record import CallRecord

INSTALL_HINT = install_hint("tracing")
_DEFAULT_SERVICE_NAME = "servinglib"
_log = logging.getLogger("servinglib.server.observe.tracing")

SHUTDOWN_TIMEOUT_S = 2.0
"""How long a stop waits for the span exporter before dropping what it still holds."""
_PROTOCOLS = ("http/protobuf", "grpc")


def _import_sdk() -> Any:  # noqa: ANN401 - the modules, imported lazily
    try:
        from opentelemetry import context, propagate, trace
        from opentelemetry.sdk import resources
        from opentelemetry.sdk import trace as sdk_trace
        from opentelemetry.sdk.trace import export
    except ImportError as error:
        raise FailedPreconditionError(
            f"Tracing needs opentelemetry-sdk, which is not installed: {INSTALL_HINT}"
        ) from error
    return context, propagate, trace, resources, sdk_trace, export


@final
class Tracing:
    """Makes the spans of requests; one per server, shared by its front ends and its DataPlane.

    ``tracer_provider``: an OpenTelemetry TracerProvider (tests pass one
    with an in-memory exporter); None: the global one.  Use
    :meth:`from_environment` for the OTLP exporter configured by the
    standard ``OTEL_*`` variables.  :meth:`shutdown` flushes and stops a
    provider this object made.
    Thread-safe (OpenTelemetry's tracers are).
    """

    def __init__(self, tracer_provider: Any = None, *, owns_provider: bool = False) -> None:  # noqa: ANN401 - an OpenTelemetry TracerProvider
        context, propagate, trace, _resources, _sdk_trace, _export = _import_sdk()
        self._context = context
        self._propagate = propagate
        self._trace = trace
        provider = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
        self._provider = provider
        self._owns_provider = owns_provider
        self._tracer = provider.get_tracer("servinglib")
        self._server_kind = trace.SpanKind.SERVER
        self._status = trace.Status
        self._error = trace.StatusCode.ERROR

    @classmethod
    def from_environment(cls) -> Tracing:
        """Spans exported by OTLP, batched off the request path, as ``OTEL_*`` variables say.

        The variables read: docs/guides/observability.md ("Tracing").  Raises
        FailedPreconditionError naming the install command when the extra is
        missing, InvalidArgumentError for a protocol other than HTTP/protobuf or gRPC.
        """
        env = os.environ
        _context, _propagate, _trace, resources, sdk_trace, export = _import_sdk()
        protocol = env.get(
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "")
        )
        exporter = _otlp_exporter(protocol.strip() or "http/protobuf")
        resource = resources.Resource.create()
        if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
            resource = resource.merge(resources.Resource({"service.name": _DEFAULT_SERVICE_NAME}))
        provider = sdk_trace.TracerProvider(resource=resource)
        provider.add_span_processor(export.BatchSpanProcessor(exporter))
        return cls(provider, owns_provider=True)

    def start_request(
        self,
        name: str,
        carrier: Iterable[tuple[Any, Any]],
        attributes: Mapping[str, str | int],
        start_ns: int,
    ) -> RequestSpan:
        """Starts the SERVER span of a request and makes it current for the caller's context.

        ``carrier``: the request's headers or metadata as (key, value)
        pairs, bytes or text (the parent comes from ``traceparent``);
        ``start_ns``: when the request arrived, ``time.time_ns()``.
        Requires: :meth:`RequestSpan.end` called in the same context (task).
        """
        parent = self._propagate.extract(_carrier(carrier))
        span = self._tracer.start_span(
            name, parent, self._server_kind, attributes, start_time=start_ns
        )
        token = self._context.attach(self._trace.set_span_in_context(span, parent))
        return RequestSpan(span, token, self._context.detach, self._status, self._error)

    def call_finished(self, record: CallRecord) -> None:
        """Adds a finished call's stages to its request's span (a :class:`CallObserver`);
        streams get none."""
        if record.stream is None:
            self.record_call(
                record.model_name,
                record.version,
                record.signature_name or None,
                record.stages,
                record.error,
            )

    def record_call(
        self,
        model_name: str,
        version: int,
        signature_name: str | None,
        stages: CallStages,
        error: BaseException | None,
    ) -> None:
        """Adds a call's stages as child spans of the current span (the request's).

        Without a current span (the DataPlane called directly), the call
        gets a span of its own, from the stages' first mark; with one that
        is not sampled, nothing is recorded.
        """
        parent = self._trace.get_current_span()
        context = parent.get_span_context()
        own = None
        if not context.is_valid:
            first = stages.queued_ns or stages.started_ns
            own = parent = self._tracer.start_span(
                f"infer {model_name}", start_time=_epoch_ns(first) if first else None
            )
        elif not parent.is_recording():
            return
        parent.set_attribute("servinglib.model.name", model_name)
        parent.set_attribute("servinglib.model.version", version)
        if signature_name is not None:
            parent.set_attribute("servinglib.signature", signature_name)
        offset = time.time_ns() - time.perf_counter_ns()
        within = self._trace.set_span_in_context(parent)
        tracer = self._tracer
        if stages.queued_ns and stages.started_ns:
            tracer.start_span("queue", within, start_time=stages.queued_ns + offset).end(
                stages.started_ns + offset
            )
        if stages.batch_size and stages.ended_ns:
            batch = tracer.start_span(
                "batch",
                within,
                attributes={"servinglib.batch_size": stages.batch_size},
                start_time=stages.started_ns + offset,
            )
            within = self._trace.set_span_in_context(batch)
            batch.end(stages.ended_ns + offset)
        if stages.infer_started_ns and stages.infer_ended_ns:
            tracer.start_span(
                "model call", within, start_time=stages.infer_started_ns + offset
            ).end(stages.infer_ended_ns + offset)
        if own is not None:
            if error is not None:
                own.set_status(self._status(self._error, f"{type(error).__name__}: {error}"))
            own.end()

    def shutdown(self, timeout_s: float = SHUTDOWN_TIMEOUT_S) -> bool:
        """Exports the spans still buffered and stops the provider, if this object made it.

        Waits at most ``timeout_s`` (an exporter retries an absent collector
        for its own timeout, 10 s by default, longer than a pod's grace
        allows): past it, logs a warning, leaves the export to a daemon
        thread and returns False; True once done.
        """
        if not self._owns_provider:
            return True
        done = threading.Event()

        def stop() -> None:
            self._provider.shutdown()
            done.set()

        threading.Thread(target=stop, name="servinglib-tracing-shutdown", daemon=True).start()
        if done.wait(timeout_s):
            return True
        _log.warning(
            "Tracing: the span exporter did not finish within %.1f s (is a collector "
            "listening at OTEL_EXPORTER_OTLP_ENDPOINT?); the spans still buffered are dropped",
            timeout_s,
        )
        return False


@final
class RequestSpan:
    """One request's SERVER span, current in the request's context until :meth:`end`.

    Not thread-safe: end it once, in the context that started it.
    """

    __slots__ = ("_detach", "_error", "_span", "_status", "_token")

    def __init__(self, span: Any, token: object, detach: Any, status: Any, error: Any) -> None:  # noqa: ANN401 - OpenTelemetry's span, context.detach, Status, StatusCode.ERROR
        self._span = span
        self._token = token
        self._detach = detach
        self._status = status
        self._error = error

    def end(self, code: StatusCode, message: str = "", **attributes: str | int) -> None:
        """Ends the span with the request's status (an ERROR span unless ``code`` is OK).

        ``attributes``: set on the span, ``__`` in a keyword standing for a
        dot (``http__response__status_code=200``).
        """
        span = self._span
        span.set_attribute("servinglib.status_code", code.name)
        for key, value in attributes.items():
            span.set_attribute(key.replace("__", "."), value)
        if code is not StatusCode.OK:
            span.set_status(self._status(self._error, f"{code.name}: {message}"[:500]))
        span.end()
        self._detach(self._token)


def _otlp_exporter(protocol: str) -> Any:  # noqa: ANN401 - an OpenTelemetry SpanExporter
    try:
        if protocol == "http/protobuf":
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        elif protocol == "grpc":
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (  # type: ignore[assignment]
                OTLPSpanExporter,
            )
        else:
            raise InvalidArgumentError(
                f"OTLP protocol {protocol!r} is not supported for traces: use one of "
                f"{', '.join(_PROTOCOLS)}"
            )
    except ImportError as error:
        raise FailedPreconditionError(
            f"Tracing over OTLP ({protocol}) needs its exporter, which is not installed: "
            f"{INSTALL_HINT}"
        ) from error
    return OTLPSpanExporter()


def _epoch_ns(perf_ns: int) -> int:
    return perf_ns + time.time_ns() - time.perf_counter_ns()


def _carrier(pairs: Iterable[tuple[Any, Any]]) -> dict[str, str]:
    """Headers or metadata as the propagators read them: lower-case text keys (last one wins)."""
    carrier: dict[str, str] = {}
    for key, value in pairs:
        name = key.decode("latin-1") if isinstance(key, bytes) else str(key)
        text = value.decode("latin-1") if isinstance(value, bytes) else str(value)
        carrier[name.lower()] = text
    return carrier
