"""Status codes both front ends answer for failed, loading, missing and unreadable models."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import attrs
import grpc
import httpx
import numpy as np
import pytest
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc

from servinglib.core.servable_state import ManagerState
from servinglib.server.config import ModelConfig, ModelServerConfig
from servinglib.server.server_core import ServerCore
from servinglib.testing import wait_until, write_python_model
from servinglib.testing._servers import LocalGrpcServer, LocalRestServer
from servinglib.testing.plugin import TEST_SERVER_CORE_OPTIONS

MODEL_PY = """
import os
import shutil
import time
from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec

class Model(PythonModel):
    def load(self, path):
        gate = os.path.join(path, "gate")
        deadline = time.monotonic() + 120
        while os.path.exists(gate) and time.monotonic() < deadline:
            time.sleep(0.01)

    @signature(inputs=[TensorSpec("x", "float32", [-1])],
               outputs=[TensorSpec("y", "float32", [-1])])
    def plus(self, x):
        return {"y": x + 1}
"""


def write_model(root: Path, name: str, source: str = MODEL_PY) -> ModelConfig:
    """Version 1 of python model ``name`` under ``root``, with ``source`` as its model.py."""
    return ModelConfig.python(name, write_python_model(root, name, source))


@attrs.frozen
class Servers:
    """A core serving ``good`` and the failed ``bad``, over REST and gRPC."""

    core: ServerCore
    rest: httpx.Client
    grpc: grpc.Channel
    root: Path


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    """One core per module with ``good`` serving and ``bad`` failed (its model.py raises)."""
    root = tmp_path_factory.mktemp("models")
    config = ModelServerConfig(
        [write_model(root, "good"), write_model(root, "bad", "raise RuntimeError('boom')\n")]
    )
    options = attrs.evolve(TEST_SERVER_CORE_OPTIONS, start_degraded=True)
    with ServerCore(config, options) as core:
        rest, grpc_server = LocalRestServer(core), LocalGrpcServer(core)
        with (
            httpx.Client(base_url=rest.url, timeout=30) as client,
            grpc.insecure_channel(grpc_server.target) as channel,
        ):
            yield Servers(core, client, channel, root)
        grpc_server.close()
        rest.close()


def codes(servers: Servers, name: str) -> tuple[list[int], list[grpc.StatusCode], list[str]]:
    """HTTP statuses (TF Serving, V2) and gRPC codes (Predict, ModelInfer) for one request each."""
    statuses, grpc_codes, messages = [], [], []
    for path, body in (
        (f"/v1/models/{name}:predict", {"instances": [1.0]}),
        (
            f"/v2/models/{name}/infer",
            {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1.0]}]},
        ),
    ):
        response = servers.rest.post(path, json=body)
        statuses.append(response.status_code)
        messages.append(response.json()["error"])
    predict = predict_pb2.PredictRequest()
    predict.model_spec.name = name
    predict.inputs["x"].dtype = 1
    predict.inputs["x"].tensor_shape.dim.add(size=1)
    predict.inputs["x"].float_val.append(1.0)
    infer = service_pb2.ModelInferRequest(model_name=name)
    tensor = infer.inputs.add(name="x", datatype="FP32", shape=[1])
    tensor.contents.fp32_contents.append(1.0)
    calls = (
        lambda: prediction_service_pb2_grpc.PredictionServiceStub(servers.grpc).Predict(
            predict, timeout=30
        ),
        lambda: service_pb2_grpc.GRPCInferenceServiceStub(servers.grpc).ModelInfer(
            infer, timeout=30
        ),
    )
    for call in calls:
        with pytest.raises(grpc.RpcError) as caught:
            call()
        grpc_codes.append(caught.value.code())
        messages.append(caught.value.details() or "")
    return statuses, grpc_codes, messages


def test_a_failed_version_is_not_found_naming_its_error(servers: Servers) -> None:
    """A version whose load failed answers 404 / NOT_FOUND with its load error, not 503."""
    statuses, grpc_codes, messages = codes(servers, "bad")
    assert statuses == [404, 404]
    assert grpc_codes == [grpc.StatusCode.NOT_FOUND] * 2
    assert all("failed to load" in m and "boom" in m for m in messages), messages


def test_a_loading_version_stays_unavailable(servers: Servers) -> None:
    """A version still loading answers 503 / UNAVAILABLE on both front ends."""
    config = write_model(servers.root, "slow")
    gate = Path(config.base_path) / "1" / "gate"
    gate.touch()
    loading = threading.Thread(target=servers.core.load_model, args=(config,))
    loading.start()
    try:
        wait_until(
            lambda: any(
                entry.state.manager_state is ManagerState.LOADING
                for entry in servers.core.monitor.get_version_states("slow").values()
            ),
            timeout_s=60,
        )
        statuses, grpc_codes, _ = codes(servers, "slow")
    finally:
        gate.unlink()
        loading.join(60)
    assert statuses == [503, 503]
    assert grpc_codes == [grpc.StatusCode.UNAVAILABLE] * 2


def test_data_with_binary_data_is_invalid_on_both_protocols(servers: Servers) -> None:
    """A V2 input carrying both JSON data and binary data (or raw contents) is refused."""
    raw = np.array([1.0], np.float32).tobytes()
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": "x",
                    "datatype": "FP32",
                    "shape": [1],
                    "data": [2.0],
                    "parameters": {"binary_data_size": len(raw)},
                }
            ]
        }
    ).encode()
    response = servers.rest.post(
        "/v2/models/good/infer",
        content=header + raw,
        headers={"Inference-Header-Content-Length": str(len(header))},
    )
    assert response.status_code == 400
    assert "both 'data' and binary data" in response.json()["error"]
    infer = service_pb2.ModelInferRequest(model_name="good", raw_input_contents=[raw])
    infer.inputs.add(name="x", datatype="FP32", shape=[1]).contents.fp32_contents.append(2.0)
    with pytest.raises(grpc.RpcError) as caught:
        service_pb2_grpc.GRPCInferenceServiceStub(servers.grpc).ModelInfer(infer, timeout=30)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_a_missing_base_path_is_not_found(servers: Servers) -> None:
    """Loading a model whose base path does not exist raises NOT_FOUND naming the path."""
    from servinglib.errors import NotFoundError

    missing = servers.root / "missing"
    with pytest.raises(NotFoundError, match="Could not find base path"):
        servers.core.load_model(ModelConfig.python("missing", missing))


UNREADABLE = """
import os
import shutil
import sys
import tempfile
from servinglib.errors import ServingError
from servinglib.loaders.python import PythonLoader
from servinglib.loaders.tensorflow import SavedModelLoader

if os.geteuid() == 0:  # root reads everything: become nobody (after the imports)
    os.setgid(65534)
    os.setuid(65534)
for loader in (PythonLoader(sys.argv[1]), SavedModelLoader(sys.argv[2]), PythonLoader(sys.argv[3])):
    try:
        loader.load()
    except ServingError as error:
        print(error.code.name, error.message)
"""


def test_unreadable_models_are_permission_errors() -> None:
    """Version directories and a model.py the server may not read fail PERMISSION_DENIED."""
    root = Path(tempfile.mkdtemp())  # pytest's tmp_path lies in a directory private to root
    python_version = Path(write_model(root, "py").base_path) / "1"
    tf_version = root / "tf" / "1"
    tf_version.mkdir(parents=True)
    (tf_version / "saved_model.pb").write_bytes(b"")
    file_version = Path(write_model(root, "file").base_path) / "1"
    for path in (root, *root.rglob("*")):
        path.chmod(0o755)
    unreadable = (python_version, tf_version, file_version / "model.py")
    for path in unreadable:
        path.chmod(0o000)
    try:
        arguments = [str(path) for path in (python_version, tf_version, file_version)]
        result = subprocess.run(
            [sys.executable, "-c", UNREADABLE, *arguments],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        for path in unreadable:
            path.chmod(0o755)
        shutil.rmtree(root)
    lines = result.stdout.splitlines()
    assert len(lines) == 3, result.stderr
    for line, version in zip(lines[:2], (python_version, tf_version), strict=True):
        assert line.startswith(f"PERMISSION_DENIED Cannot read model directory {version}: ")
        assert "Permission denied" in line
    assert lines[2].startswith(f"PERMISSION_DENIED Cannot read {file_version / 'model.py'}: ")
