"""The issue's shape bombs against a real servinglib-server: refused, its peak RSS flat."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import pytest
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from tests.server.cli.test_model_server import CONFIG, Server, python_model

# The peak RSS a refused bomb may add: parsing and answering it, never what its shape claims.
ALLOWED_GROWTH_BYTES = 64 << 20


def status_bytes(pid: int, field: str) -> int:
    """A memory figure of /proc/PID/status: VmRSS (resident), VmHWM (peak resident)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def peak_rss_bytes(pid: int) -> int:
    """The process's peak resident memory (VmHWM), which the kernel keeps for us."""
    return status_bytes(pid, "VmHWM")


@contextmanager
def triple_server(
    root: Path, *flags: str, on_start: Callable[[Server], None] | None = None
) -> Iterator[Server]:
    """A ready servinglib-server with the python model "triple" (x * 3) under ``root``.

    ``on_start`` is called once the process runs, before it is ready.
    """
    python_model(root, "triple", 3)
    config = root / "models.config"
    config.write_text(CONFIG % ("triple", root / "triple"))
    running = Server(f"--model_config_file={config}", "--allow_python_code_execution", *flags)
    try:
        if on_start is not None:
            on_start(running)
        running.wait_ready()
        yield running
    finally:
        running.close()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    with triple_server(tmp_path) as running:
        yield running


def test_the_issues_bombs_are_invalid_arguments_and_cost_no_memory(server: Server) -> None:
    """248-byte V2 BYTES [2^27], 31-byte Predict [2^26] and DT_STRING [2^27]: 400s, flat RSS."""
    assert server.predict("triple", [1.0]).status_code == 200  # warm: the first request's costs
    before = peak_rss_bytes(server.process.pid)

    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "x",
                    "datatype": "BYTES",
                    "shape": [2**27],
                    "parameters": {"binary_data_size": 0},
                }
            ]
        }
    ).encode()
    response = server.http.post(
        "/v2/models/triple/infer",
        content=header,
        headers={"Inference-Header-Content-Length": str(len(header))},
    )
    assert response.status_code == 400, response.text
    assert "Input tensor 'x'" in response.json()["error"]
    assert "134217728" in response.json()["error"]

    stub = prediction_service_pb2_grpc.PredictionServiceStub(server.channel)
    for data_type, field, value, size in (
        (1, "float_val", 1.0, 2**26),  # DT_FLOAT
        (7, "string_val", b"s", 2**27),  # DT_STRING
    ):
        request = predict_pb2.PredictRequest()
        request.model_spec.name = "triple"
        tensor = request.inputs["x"]
        tensor.dtype = data_type
        tensor.tensor_shape.dim.add(size=size)
        getattr(tensor, field).append(value)
        with pytest.raises(grpc.RpcError) as error:
            stub.Predict(request, timeout=30)
        assert error.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "Input tensor 'x'" in (error.value.details() or "")
        assert f"[{size}]" in (error.value.details() or "")

    growth = peak_rss_bytes(server.process.pid) - before
    assert growth < ALLOWED_GROWTH_BYTES, f"peak RSS grew by {growth >> 20} MiB"
