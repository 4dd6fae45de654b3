"""servinglib-server under hanging models, blocked loads and signals: nothing stalls the rest."""

from __future__ import annotations

import concurrent.futures
import re
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from servinglib.testing import wait_until

# A model whose calls block until the test writes GO (or 120 s pass), noting each call started.
GATED_MODEL_PY = """
import time
from pathlib import Path
from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec

class Model(PythonModel):
    def load(self, path):
        self.root = Path(path)
        (self.root / "calls").mkdir(exist_ok=True)

    @signature(name="serving_default", inputs=[TensorSpec("x", "float32", [-1])],
               outputs=[TensorSpec("y", "float32", [-1])])
    def predict(self, x):
        (self.root / "calls" / str(time.monotonic_ns())).write_text("")
        gate = self.root / "GO"
        deadline = time.monotonic() + 120
        while not gate.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        return {"y": x * 2}
"""

X_GRPC_TIMEOUT_S = 3.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def gated_model(root: Path, name: str) -> Path:
    version = root / name / "1"
    version.mkdir(parents=True)
    (version / "model.py").write_text(textwrap.dedent(GATED_MODEL_PY))
    return version


def config_text(root: Path, *names: str, extra: str = "") -> str:
    entries = "".join(
        f'config {{ name: "{n}" base_path: "{root / n}" model_platform: "python" }}\n'
        for n in names
    )
    return f"model_config_list {{\n{entries}{extra}}}\n"


class Process:
    """A servinglib-server process on free ports of 127.0.0.1, with REST and gRPC clients."""

    def __init__(self, *args: str) -> None:
        self.rest_port, self.grpc_port = free_port(), free_port()
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "servinglib",
                f"--rest_api_port={self.rest_port}",
                f"--port={self.grpc_port}",
                "--rest_api_host=127.0.0.1",
                "--grpc_host=127.0.0.1",
                "--allow_python_code_execution",
                *args,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.http = httpx.Client(base_url=f"http://127.0.0.1:{self.rest_port}", timeout=30)
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.grpc_port}")
        self.predict_rpc = prediction_service_pb2_grpc.PredictionServiceStub(self.channel).Predict
        self._output: str | None = None

    def wait_ready(self) -> None:
        def ready() -> bool:
            try:
                return self.http.get("/v2/health/ready").status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(lambda: ready() or self.process.poll() is not None, timeout_s=60)
        assert self.process.poll() is None, self.output()

    def predict(self, model: str, value: float) -> httpx.Response:
        return self.http.post(f"/v1/models/{model}:predict", json={"instances": [value]})

    def grpc_request(self, model: str, value: float) -> predict_pb2.PredictRequest:
        request = predict_pb2.PredictRequest()
        request.model_spec.name = model
        request.inputs["x"].dtype = 1  # DT_FLOAT
        request.inputs["x"].tensor_shape.dim.add(size=1)
        request.inputs["x"].float_val.append(value)
        return request

    def metric(self, line_start: str) -> float | None:
        for line in self.http.get("/monitoring/prometheus/metrics").text.splitlines():
            if line.startswith(line_start):
                return float(line.rsplit(" ", 1)[1])
        return None

    def output(self) -> str:
        """Everything the process printed (killing it first if it still runs)."""
        if self._output is None:
            if self.process.poll() is None:
                self.process.kill()
            self._output, _ = self.process.communicate(timeout=30)
        return self._output

    def close(self) -> None:
        self.http.close()
        self.channel.close()
        self.output()


@pytest.fixture
def two_models(tmp_path: Path) -> Iterator[tuple[Process, Path]]:
    stuck = gated_model(tmp_path, "stuck")
    gated_model(tmp_path, "other")
    (tmp_path / "other" / "1" / "GO").write_text("")  # the other model answers at once
    config = tmp_path / "models.config"
    config.write_text(config_text(tmp_path, "stuck", "other"))
    server = Process(
        f"--model_config_file={config}",
        "--enable_metrics",
        "--rest_api_timeout_in_ms=3000",
        "--shutdown_grace_seconds=2",
    )
    try:
        server.wait_ready()
        yield server, stuck
    finally:
        (stuck / "GO").write_text("")  # lets the hanging calls end
        server.close()


def test_a_hanging_model_leaves_the_others_answered(two_models: tuple[Process, Path]) -> None:
    """64 requests hang in one model over REST and gRPC; another model answers every request."""
    server, stuck = two_models
    calls = stuck / "calls"
    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        hanging_rest = [pool.submit(server.predict, "stuck", 1.0) for _ in range(32)]
        hanging_grpc = [
            server.predict_rpc.future(server.grpc_request("stuck", 1.0), timeout=X_GRPC_TIMEOUT_S)
            for _ in range(32)
        ]
        wait_until(lambda: any(calls.iterdir()), timeout_s=30)
        for value in range(20):
            assert server.predict("other", value).json() == {"predictions": [value * 2]}
            response = server.predict_rpc(server.grpc_request("other", value), timeout=10)
            assert list(response.outputs["y"].float_val) == [value * 2]
        # The hanging model's calls hold at most its share of the pool, not every worker.
        running = len(list(calls.iterdir()))
        assert 1 <= running < 8
        assert {f.result(timeout=30).status_code for f in hanging_rest} == {504}
        for future in hanging_grpc:
            with pytest.raises(grpc.RpcError) as failure:
                future.result(timeout=30)
            assert failure.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
        # Past the deadlines: still answering, the overdue calls counted and named.
        assert server.predict("other", 3.0).json() == {"predictions": [6.0]}
        overdue = 'servinglib_model_calls_past_deadline{model_name="stuck"}'
        wait_until(lambda: server.metric(overdue) == running, timeout_s=10)
        assert len(list(calls.iterdir())) == running  # the waiting ones were never run
        (stuck / "GO").write_text("")
        wait_until(lambda: server.metric(overdue) in (None, 0.0), timeout_s=30)
    server.process.send_signal(signal.SIGTERM)
    assert server.process.wait(timeout=30) == 0
    out = server.output()
    # gRPC cancels a handler at the client's deadline, which may come before the plane's timer.
    timed_out = [
        line for line in out.splitlines() if "DEADLINE_EXCEEDED (" in line or "cancelled (" in line
    ]
    assert len(timed_out) == 64
    assert all("model stuck version 1" in line for line in timed_out)
    assert all(re.search(r"deadline [23]\.\d+ s", line) for line in timed_out)
    assert out.count("still running past its deadline") == running


def test_v2_grpc_of_another_model_answers_while_one_hangs(
    two_models: tuple[Process, Path],
) -> None:
    """KServe V2 over gRPC (tritonclient) reaches the other model while the first one hangs."""
    server, stuck = two_models
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        hanging = [pool.submit(server.predict, "stuck", 1.0) for _ in range(16)]
        wait_until(lambda: any((stuck / "calls").iterdir()), timeout_s=30)
        client = triton_grpc.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        try:
            value = triton_grpc.InferInput("x", [1], "FP32")
            value.set_data_from_numpy(np.array([4.0], np.float32))
            for _ in range(10):
                result = client.infer("other", [value], client_timeout=10)
                assert result.as_numpy("y").tolist() == [8.0]
        finally:
            client.close()
        (stuck / "GO").write_text("")
        assert {f.result(timeout=30).status_code for f in hanging} <= {200, 504}
