"""OpenTelemetry tracing: a span per request, child of the client's traceparent, with its stages.

Servers run on 127.0.0.1 over one DataPlane; spans go to the SDK's in-memory exporter, and in
the last tests through the real OTLP exporters (HTTP/protobuf and gRPC) to receivers here that
parse the OTLP protobuf messages (opentelemetry-proto's own classes).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import http.server
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import grpc
import httpx
import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from servinglib.batching import BatchingParameters
from servinglib.errors import StatusCode as ServingStatus
from servinglib.server.config import ModelServerConfig
from servinglib.server.observe.tracing import Tracing
from servinglib.server.plane.data_plane import DataPlane
from servinglib.server.server_core import ServerCore, ServerCoreOptions
from servinglib.testing.plugin import TEST_SERVER_CORE_OPTIONS
from tests.server.observe.test_statistics import Servers, python_model, serve_plane

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"


@attrs.define
class Traced:
    """Servers over one traced DataPlane, and the spans they finished."""

    servers: Servers
    exporter: InMemorySpanExporter

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())


@pytest.fixture
def traced_for(tmp_path: Path) -> Iterator[Any]:
    """A function serving "m" with tracing into an in-memory exporter; stops everything after."""
    stops: list[Any] = []

    def serve(options: ServerCoreOptions = TEST_SERVER_CORE_OPTIONS) -> Traced:
        exporter = InMemorySpanExporter()
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        stops.append(provider.shutdown)
        core = ServerCore(ModelServerConfig([python_model(tmp_path, "m")]), options)
        stops.append(core.close)
        plane = DataPlane(core, tracing=Tracing(provider))
        stops.append(plane.close)
        return Traced(serve_plane(plane, stops), exporter)

    yield serve
    for stop in reversed(stops):
        stop()


def by_name(spans: list[ReadableSpan]) -> dict[str, ReadableSpan]:
    named = {span.name: span for span in spans}
    assert len(named) == len(spans), [span.name for span in spans]
    return named


def children_of(spans: list[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    return [s for s in spans if s.parent and s.parent.span_id == parent.context.span_id]


def parent_of(span: ReadableSpan) -> int:
    assert span.parent is not None, span.name
    return span.parent.span_id


def assert_request_span(span: ReadableSpan) -> None:
    """A SERVER span in the client's trace, child of the client's span, naming the model."""
    assert span.kind is SpanKind.SERVER
    assert format(span.context.trace_id, "032x") == TRACE_ID
    assert format(parent_of(span), "016x") == PARENT_ID
    assert span.attributes is not None
    assert span.attributes["servinglib.model.name"] == "m"
    assert span.attributes["servinglib.model.version"] == 1


def test_a_rest_request_is_a_span_in_the_callers_trace_with_its_stages(traced_for: Any) -> None:
    """REST infer with a traceparent header: a SERVER span under it, queue and model call inside."""
    traced = traced_for()
    body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [2], "data": [1, 2]}]}
    response = httpx.post(
        f"{traced.servers.rest_url}/v2/models/m/infer",
        json=body,
        headers={"traceparent": TRACEPARENT},
    )
    assert response.status_code == 200, response.text
    httpx.get(f"{traced.servers.rest_url}/v2/health/ready")  # no model: no span
    spans = by_name(traced.spans())
    assert set(spans) == {"POST infer", "queue", "model call"}
    request = spans["POST infer"]
    assert_request_span(request)
    assert request.attributes is not None
    assert request.attributes["http.response.status_code"] == 200
    for child in ("queue", "model call"):
        assert parent_of(spans[child]) == request.context.span_id
        assert request.start_time <= spans[child].start_time <= spans[child].end_time
        assert spans[child].end_time <= request.end_time
    assert spans["queue"].end_time <= spans["model call"].start_time


def test_a_grpc_call_is_a_span_in_the_callers_trace(traced_for: Any) -> None:
    """gRPC ModelInfer with traceparent metadata (tritonclient's headers): the same spans."""
    traced = traced_for()
    tensor = triton_grpc.InferInput("x", [1], "FP32")
    tensor.set_data_from_numpy(np.array([3], np.float32))
    traced.servers.grpc.infer("m", [tensor], headers={"traceparent": TRACEPARENT})
    spans = by_name(traced.spans())
    assert set(spans) == {"inference.GRPCInferenceService/ModelInfer", "queue", "model call"}
    request = spans["inference.GRPCInferenceService/ModelInfer"]
    assert_request_span(request)
    assert request.attributes is not None
    assert request.attributes["rpc.method"] == "ModelInfer"
    assert request.status.status_code is StatusCode.UNSET


def test_a_failed_request_is_an_error_span(traced_for: Any) -> None:
    """A request the model refuses ends its span with ERROR and the status code's name."""
    traced = traced_for()
    body = {"inputs": [{"name": "x", "datatype": "INT32", "shape": [1], "data": [1]}]}
    response = httpx.post(f"{traced.servers.rest_url}/v2/models/m/infer", json=body)
    assert response.status_code == 400
    (request,) = [span for span in traced.spans() if span.kind is SpanKind.SERVER]
    assert request.status.status_code is StatusCode.ERROR
    assert request.attributes is not None
    assert request.attributes["servinglib.status_code"] == "INVALID_ARGUMENT"
    assert request.parent is None  # no traceparent: a trace of its own


def test_a_batched_request_has_a_batch_span_around_its_model_call(traced_for: Any) -> None:
    """Batched: queue, then batch (with its size) holding the merged model call."""
    options = attrs.evolve(
        TEST_SERVER_CORE_OPTIONS,
        batching_parameters=BatchingParameters(
            max_batch_size=2, batch_timeout_s=60.0, num_batch_threads=1
        ),
    )
    traced = traced_for(options)
    target = traced.servers.grpc_target

    def call(value: float) -> None:
        client = triton_grpc.InferenceServerClient(target)
        try:
            tensor = triton_grpc.InferInput("x", [1], "FP32")
            tensor.set_data_from_numpy(np.array([value], np.float32))
            client.infer("m", [tensor], headers={"traceparent": TRACEPARENT})
        finally:
            client.close()

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        list(pool.map(call, [1.0, 2.0]))  # the batch runs when both are in
    spans = traced.spans()
    requests = [s for s in spans if s.kind is SpanKind.SERVER]
    assert len(requests) == 2
    for request in requests:
        children = by_name(
            [s for s in spans if s.parent and s.parent.span_id == request.context.span_id]
        )
        assert set(children) == {"queue", "batch"}
        batch = children["batch"]
        assert batch.attributes is not None
        assert batch.attributes["servinglib.batch_size"] == 2
        (model_call,) = children_of(spans, batch)
        assert model_call.name == "model call"


def test_a_missing_extra_is_one_line_naming_the_install() -> None:
    """Without opentelemetry installed, Tracing fails with the pip install to run."""
    code = (
        "import sys; sys.modules['opentelemetry'] = None\n"
        "from servinglib.server.observe.tracing import Tracing\n"
        "try:\n    Tracing.from_environment()\n"
        "except Exception as error:\n    print(type(error).__name__, error)\n"
    )
    output = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert output.strip() == (
        "FailedPreconditionError Tracing needs opentelemetry-sdk, which is not installed: "
        "pip install '.[tracing]' in a servinglib checkout"
    )


# -- the real OTLP exporters, to receivers that parse OTLP's protobuf ------------------------


def exported_span_names(requests: list[bytes]) -> dict[str, tuple[str, str]]:
    """Span name → (trace id, service.name) over every ExportTraceServiceRequest received."""
    names: dict[str, tuple[str, str]] = {}
    for raw in requests:
        message = trace_service_pb2.ExportTraceServiceRequest.FromString(raw)
        for resource_spans in message.resource_spans:
            service = {a.key: a.value.string_value for a in resource_spans.resource.attributes}[
                "service.name"
            ]
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    names[span.name] = (span.trace_id.hex(), service)
    return names


def _export_one_request(tmp_path: Path) -> None:
    """Serves "m" traced as the OTEL_* variables say, sends one traced request, flushes."""
    stops: list[Any] = []
    try:
        tracing = Tracing.from_environment()
        stops.append(tracing.shutdown)  # flushes the batch processor, after the servers stop
        core = ServerCore(
            ModelServerConfig([python_model(tmp_path, "m")]), TEST_SERVER_CORE_OPTIONS
        )
        stops.append(core.close)
        plane = DataPlane(core, tracing=tracing)
        stops.append(plane.close)
        servers = serve_plane(plane, stops)
        body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1]}]}
        response = httpx.post(
            f"{servers.rest_url}/v2/models/m/infer",
            json=body,
            headers={"traceparent": TRACEPARENT},
        )
        assert response.status_code == 200
    finally:
        for stop in reversed(stops):
            stop()


@contextlib.contextmanager
def otlp_http_receiver() -> Iterator[tuple[str, list[bytes]]]:
    """An OTLP/HTTP receiver on 127.0.0.1: its traces endpoint and the request bodies received."""
    received: list[bytes] = []

    class Receiver(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers["Content-Length"])
            if self.path == "/v1/traces":
                assert self.headers["Content-Type"] == "application/x-protobuf"
                received.append(self.rfile.read(length))
            self.send_response(200 if self.path == "/v1/traces" else 404)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_args: object) -> None:
            pass

    receiver = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    thread = threading.Thread(target=receiver.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{receiver.server_address[1]}/v1/traces", received
    finally:
        receiver.shutdown()
        receiver.server_close()


def test_spans_reach_an_otlp_http_receiver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """from_environment exports by OTLP/HTTP to OTEL_EXPORTER_OTLP_TRACES_ENDPOINT."""
    with otlp_http_receiver() as (endpoint, received):
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint)
        monkeypatch.setenv("OTEL_SERVICE_NAME", "served-here")
        _export_one_request(tmp_path)
    names = exported_span_names(received)
    assert names == {
        "POST infer": (TRACE_ID, "served-here"),
        "queue": (TRACE_ID, "served-here"),
        "model call": (TRACE_ID, "served-here"),
    }


def test_spans_reach_an_otlp_grpc_receiver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With OTEL_EXPORTER_OTLP_PROTOCOL=grpc, spans go to an OTLP gRPC TraceService."""
    received: list[bytes] = []

    class TraceService(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request: Any, context: Any) -> Any:  # noqa: N802 - the generated service's names
            received.append(request.SerializeToString())
            return trace_service_pb2.ExportTraceServiceResponse()

    receiver = grpc.server(concurrent.futures.ThreadPoolExecutor(2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(TraceService(), receiver)
    port = receiver.add_insecure_port("127.0.0.1:0")
    receiver.start()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", f"http://127.0.0.1:{port}")
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    try:
        _export_one_request(tmp_path)
    finally:
        receiver.stop(0)
    names = exported_span_names(received)
    assert set(names) == {"POST infer", "queue", "model call"}
    assert {service for _, service in names.values()} == {"servinglib"}


def test_an_unsupported_otlp_protocol_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """http/json (no exporter in the extra) is refused, naming the supported protocols."""
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json")
    with pytest.raises(Exception, match="http/protobuf, grpc"):
        Tracing.from_environment()


def test_a_stop_waits_for_an_absent_collector_no_longer_than_its_bound(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A collector that accepts and never answers holds the exporter for its 10 s timeout; the
    shutdown gives up after its own bound, says so, and drops the spans it held."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        port = silent.getsockname()[1]
        monkeypatch.setenv(
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"http://127.0.0.1:{port}/v1/traces"
        )
        tracing = Tracing.from_environment()
        span = tracing.start_request("POST infer", (), {}, time.time_ns())
        span.end(ServingStatus.OK)
        assert tracing.shutdown(timeout_s=0.2) is False
    assert "did not finish within 0.2 s" in caplog.text
