"""--enable_tracing: the server process exports its requests' spans by OTLP as OTEL_* say."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.server.cli.test_model_server import CONFIG, Server, python_model
from tests.server.observe.test_tracing import (
    TRACE_ID,
    TRACEPARENT,
    exported_span_names,
    otlp_http_receiver,
)


def test_enable_tracing_exports_spans_to_the_otlp_endpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A predict with a traceparent reaches the OTLP receiver, in the caller's trace, by exit."""
    python_model(tmp_path, "triple", 3)
    config = tmp_path / "models.config"
    config.write_text(CONFIG % ("triple", tmp_path / "triple"))
    with otlp_http_receiver() as (endpoint, received):
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint)
        monkeypatch.setenv("OTEL_SERVICE_NAME", "cli-test")
        running = Server(
            f"--model_config_file={config}", "--allow_python_code_execution", "--enable_tracing"
        )
        try:
            running.wait_ready()
            response = running.http.post(
                "/v1/models/triple:predict",
                json={"instances": [1.0]},
                headers={"traceparent": TRACEPARENT},
            )
            assert response.json() == {"predictions": [3.0]}
            running.process.send_signal(signal.SIGINT)
            assert running.process.wait(timeout=30) == 0, running.output()
        finally:
            running.close()
    names = exported_span_names(received)
    assert names["POST predict"] == (TRACE_ID, "cli-test")
    assert {"queue", "model call"} <= set(names)
