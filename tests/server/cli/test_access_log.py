"""Text log lines: text a client controls cannot start a line of its own (CR, LF are escaped)."""

from __future__ import annotations

import signal

import grpc
import pytest
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from servinglib.testing import write_python_model
from tests.server.cli.test_model_server import Server

MODEL_PY = """
from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec

class Model(PythonModel):
    @signature(name="serving_default", inputs=[TensorSpec("x", "float32", [-1])],
               outputs=[TensorSpec("y", "float32", [-1])])
    def predict(self, x):
        return {"y": x * 2}
"""

FORGED = "FORGED INFO servinglib.requests= REST m predict 200 0.10 ms"


@pytest.fixture(scope="module")
def output(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The text log of a server that got a forged REST path and a forged gRPC model name."""
    root = tmp_path_factory.mktemp("models")
    write_python_model(root, "m", MODEL_PY)
    server = Server(
        "--model_name=m",
        f"--model_base_path={root / 'm'}",
        "--model_platform=python",
        "--allow_python_code_execution",
        "--log_requests",
    )
    try:
        server.wait_ready()
        path = "/v1/models/m%0d%0a" + FORGED.replace(" ", "%20") + ":predict"
        forged = server.http.post(path, json={"instances": [1.0]})
        assert forged.status_code == 404, forged.text
        stub = prediction_service_pb2_grpc.PredictionServiceStub(server.channel)
        request = predict_pb2.PredictRequest()
        request.model_spec.name = "m\n" + FORGED.replace("REST", "GRPC")
        request.inputs["x"].dtype = 1
        request.inputs["x"].tensor_shape.dim.add().size = 1
        request.inputs["x"].float_val.append(1.0)
        with pytest.raises(grpc.RpcError) as failed:
            stub.Predict(request, timeout=30)
        assert failed.value.code() == grpc.StatusCode.NOT_FOUND
        server.process.send_signal(signal.SIGTERM)
        server.process.wait(60)
        return server.output()
    finally:
        server.close()


def test_a_crlf_in_a_rest_path_is_escaped_in_one_access_log_line(output: str) -> None:
    """%0d%0a in a REST path shows as \\r\\n inside its one access-log line, starting none."""
    lines = [line for line in output.splitlines() if "FORGED" in line]
    assert not [line for line in lines if line.startswith("FORGED")], output
    (rest,) = [line for line in lines if "servinglib.requests: REST" in line]
    assert f"REST m\\r\\n{FORGED} predict 404" in rest


def test_a_newline_in_a_grpc_model_name_is_escaped_in_one_access_log_line(output: str) -> None:
    """A newline in a gRPC model_name shows as \\n inside its one access-log line, starting none."""
    lines = [line for line in output.splitlines() if "FORGED" in line]
    (grpc_line,) = [line for line in lines if "servinglib.requests: GRPC" in line]
    assert "GRPC m\\n" + FORGED.replace("REST", "GRPC") in grpc_line
    assert "tensorflow.serving.PredictionService/Predict NOT_FOUND" in grpc_line
