"""--log_format=json: every line one JSON object; model tracebacks once per request, with its id."""

from __future__ import annotations

import json
import logging
import signal
import sys
from typing import Any

import grpc
import pytest
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from servinglib.examples import HALF_PLUS_TWO
from servinglib.server.cli.log_format import TextFormatter
from servinglib.testing import write_python_model
from tests.server.cli.test_model_server import Server

MODEL_PY = """
from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec

class Model(PythonModel):
    @signature(name="serving_default", inputs=[TensorSpec("x", "float32", [-1])],
               outputs=[TensorSpec("y", "float32", [-1])])
    def predict(self, x):
        if (x < 0).any():
            raise ValueError("negative input")  # THE LINE THAT RAISES
        return {"y": x * 2}
"""


def json_lines(output: str) -> list[dict[str, Any]]:
    """The process's log lines, each parsed as JSON (a line that is not JSON fails the test)."""
    return [json.loads(line) for line in output.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def logged(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """The JSON lines of a server that served a good and a failing request on each protocol."""
    root = tmp_path_factory.mktemp("models")
    write_python_model(root, "m", MODEL_PY)
    server = Server(
        "--model_name=m",
        f"--model_base_path={root / 'm'}",
        "--model_platform=python",
        "--allow_python_code_execution",
        "--log_format=json",
        "--log_requests",
        "--enable_batching",
    )
    try:
        server.wait_ready()
        ok = server.http.post("/v1/models/m:predict", json={"instances": [1.0]})
        assert ok.status_code == 200, ok.text
        failed = server.http.post(
            "/v1/models/m:predict", json={"instances": [-1.0]}, headers={"x-request-id": "rest-x"}
        )
        assert failed.status_code >= 500
        assert failed.headers["x-request-id"] == "rest-x"
        stub = prediction_service_pb2_grpc.PredictionServiceStub(server.channel)
        request = predict_pb2.PredictRequest()
        request.model_spec.name = "m"
        request.inputs["x"].dtype = 1
        request.inputs["x"].tensor_shape.dim.add().size = 1
        request.inputs["x"].float_val.append(-1.0)
        with pytest.raises(grpc.RpcError):
            stub.Predict(request, timeout=30, metadata=[("x-request-id", "grpc-x")])
        server.process.send_signal(signal.SIGTERM)
        server.process.wait(60)
        return json_lines(server.output())
    finally:
        server.close()


def test_every_line_is_one_json_object_with_the_fields(logged: list[dict[str, Any]]) -> None:
    """Each line has time, level, logger and message."""
    assert logged
    for line in logged:
        assert {"time", "level", "logger", "message"} <= line.keys(), line


@pytest.mark.parametrize("request_id", ["rest-x", "grpc-x"])
def test_a_model_exception_is_logged_once_with_its_traceback_and_request_id(
    logged: list[dict[str, Any]], request_id: str
) -> None:
    """On both protocols, one line names the request id, model and version, with model.py's line."""
    tracebacks = [line for line in logged if "traceback" in line]
    ours = [line for line in tracebacks if line.get("request_id") == request_id]
    assert len(ours) == 1, tracebacks
    (line,) = ours
    assert (line["model"], line["version"], line["level"]) == ("m", 1, "ERROR")
    assert "model.py" in line["traceback"]
    assert "THE LINE THAT RAISES" in line["traceback"]
    assert "ValueError: negative input" in line["traceback"]


def test_the_access_log_is_json_with_the_request_fields(logged: list[dict[str, Any]]) -> None:
    """--log_requests lines carry model, api, code and latency, and the request id."""
    access = [line for line in logged if line["logger"] == "servinglib.requests"]
    by_id = {line.get("request_id"): line for line in access}
    assert by_id["rest-x"]["model"] == "m"
    assert by_id["rest-x"]["api"] == "predict"
    assert by_id["rest-x"]["status"] >= 500
    assert by_id["grpc-x"]["code"] in ("UNKNOWN", "INTERNAL")
    assert all(isinstance(line["latency_ms"], float) for line in access)
    assert any(line.get("code") == "OK" for line in access)


def test_batching_on_is_logged_with_its_parameters(logged: list[dict[str, Any]]) -> None:
    """One line says model m version 1 is batched, naming its parameters."""
    lines = [line for line in logged if "batching on" in line["message"]]
    assert len(lines) == 1
    assert lines[0]["model"] == "m"
    assert lines[0]["version"] == 1
    assert "max_batch_size=" in lines[0]["message"]
    assert "batch_timeout_s=" in lines[0]["message"]


def test_text_lines_escape_control_characters_and_keep_tracebacks() -> None:
    """A text line's message shows CR, LF, NUL, DEL and U+2028 escaped; a traceback follows it."""
    formatter = TextFormatter("%(levelname)s %(name)s: %(message)s")
    record = logging.makeLogRecord(
        {
            "name": "x",
            "levelname": "ERROR",
            "msg": "model %s\tfailed",
            "args": ("a\r\nb\x00\x7f\u2028",),
        }
    )
    assert formatter.format(record) == "ERROR x: model a\\r\\nb\\x00\\x7f\\u2028\tfailed"
    try:
        raise ValueError("boom")
    except ValueError:
        record.exc_info = sys.exc_info()
    lines = formatter.format(record).splitlines()
    assert lines[0] == "ERROR x: model a\\r\\nb\\x00\\x7f\\u2028\tfailed"
    assert lines[1] == "Traceback (most recent call last):"
    assert lines[-1] == "ValueError: boom"


def test_a_tensorflow_servers_json_log_is_json_from_its_first_line() -> None:
    """Serving a SavedModel with --log_format=json: TensorFlow's import banner (native lines
    on stderr) arrives as JSON records of the tensorflow logger, so every line parses."""
    server = Server(
        "--model_name=half_plus_two",
        f"--model_base_path={HALF_PLUS_TWO}",
        "--log_format=json",
        "--log_level=DEBUG",
    )
    try:
        server.wait_ready()
    finally:
        server.close()
    lines = json_lines(server.output())
    banner = [line for line in lines if "oneDNN" in line["message"]]
    assert banner
    assert {line["logger"] for line in banner} == {"tensorflow"}
