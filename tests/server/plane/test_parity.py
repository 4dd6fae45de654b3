"""One DataPlane answers for both front ends: REST and gRPC give the same answer to each question.

For a matrix of model states (available, at its in-flight limit, loading, failed, unloading,
unknown model, unknown version, a label to an available and to a missing version), every
question the two protocols share is asked over both, against real servers on 127.0.0.1 with the
official clients' stubs, and the answers are compared after decoding.  HTTP statuses and gRPC
codes are compared through servinglib's one error table.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import grpc
import httpx
import pytest
import tritonclient.grpc.model_config_pb2 as triton_config
import tritonclient.grpc.service_pb2 as v2
import tritonclient.grpc.service_pb2_grpc as v2_grpc
from tensorflow_serving.apis import (
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_service_pb2_grpc,
    prediction_service_pb2_grpc,
)

from servinglib.errors import ServingError, StatusCode
from servinglib.server.config import ModelConfig, ModelServerConfig
from servinglib.server.server_core import ServerCore
from servinglib.testing import wait_until, write_python_model
from servinglib.testing._servers import LocalGrpcServer, LocalRestServer
from servinglib.testing.plugin import TEST_SERVER_CORE_OPTIONS

MODEL_PY = """
import time
from pathlib import Path
from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec

class Model(PythonModel):
    def load(self, path):
        self.path = Path(path)
        if (self.path / "BROKEN").exists():
            raise ValueError("this version is broken")
        while (self.path / "WAIT").exists():
            time.sleep(0.01)

    @signature(name="serving_default", inputs=[TensorSpec("x", "float32", [-1])],
               outputs=[TensorSpec("y", "float32", [-1])])
    def predict(self, x):
        (self.path.parent / "CALLED").write_text("")
        while (self.path.parent / "HOLD").exists():
            time.sleep(0.01)
        return {"y": x}
"""

Question = tuple[str, int | None, str | None]  # model, version, label


def write_model(root: Path, name: str, *, broken: bool = False, wait: bool = False) -> ModelConfig:
    flags = {flag: "" for flag, wanted in (("BROKEN", broken), ("WAIT", wait)) if wanted}
    return ModelConfig.python(name, write_python_model(root, name, MODEL_PY, files=flags))


def grpc_status(error: grpc.RpcError) -> int:
    """The HTTP status servinglib's error table gives the RPC's code."""
    return StatusCode[error.code().name].http_status


@attrs.define
class Both:
    """A core served over REST and gRPC; each question asked over both, answers decoded."""

    core: ServerCore
    rest: LocalRestServer
    grpc_server: LocalGrpcServer
    channel: grpc.Channel

    def rest_get(self, path: str) -> tuple[int, Any]:
        response = httpx.get(f"{self.rest.url}{path}", timeout=30)
        return response.status_code, response.json() if response.content else None

    def model_ready(self, model: str, version: int | None) -> tuple[bool, bool]:
        path = f"/v2/models/{model}" + (f"/versions/{version}" if version is not None else "")
        over_rest = self.rest_get(f"{path}/ready")[0] == 200
        stub = v2_grpc.GRPCInferenceServiceStub(self.channel)
        request = v2.ModelReadyRequest(name=model, version=str(version or ""))
        return over_rest, stub.ModelReady(request, timeout=30).ready

    def tfs_path(self, model: str, version: int | None, label: str | None) -> str:
        if label is not None:
            return f"/v1/models/{model}/labels/{label}"
        return f"/v1/models/{model}" + (f"/versions/{version}" if version is not None else "")

    def status(self, model: str, version: int | None, label: str | None) -> tuple[Any, Any]:
        code, body = self.rest_get(self.tfs_path(model, version, label))
        over_rest: Any = (code, None)
        if code == 200:
            over_rest = (
                200,
                [
                    (int(v["version"]), v["state"], v["status"]["error_code"])
                    for v in body["model_version_status"]
                ],
            )
        request = get_model_status_pb2.GetModelStatusRequest()
        request.model_spec.name = model
        if label is not None:
            request.model_spec.version_label = label
        elif version is not None:
            request.model_spec.version.value = version
        stub = model_service_pb2_grpc.ModelServiceStub(self.channel)
        try:
            response = stub.GetModelStatus(request, timeout=30)
        except grpc.RpcError as error:
            return over_rest, (grpc_status(error), None)
        states = get_model_status_pb2.ModelVersionStatus.State
        over_grpc = [
            (
                v.version,
                states.Name(v.state),
                StatusCode(v.status.error_code).name if v.status.error_code else "OK",
            )
            for v in response.model_version_status
        ]
        return over_rest, (200, over_grpc)

    def tfs_metadata(self, model: str, version: int | None, label: str | None) -> tuple[Any, Any]:
        code, body = self.rest_get(self.tfs_path(model, version, label) + "/metadata")
        over_rest: Any = (code, None)
        if code == 200:
            signatures = sorted(body["metadata"]["signature_def"]["signature_def"])
            over_rest = (200, int(body["model_spec"]["version"]), signatures)
        request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
        request.model_spec.name = model
        if label is not None:
            request.model_spec.version_label = label
        elif version is not None:
            request.model_spec.version.value = version
        stub = prediction_service_pb2_grpc.PredictionServiceStub(self.channel)
        try:
            response = stub.GetModelMetadata(request, timeout=30)
        except grpc.RpcError as error:
            return over_rest, (grpc_status(error), None)
        signature_map = get_model_metadata_pb2.SignatureDefMap()
        response.metadata["signature_def"].Unpack(signature_map)
        over_grpc = (200, response.model_spec.version.value, sorted(signature_map.signature_def))
        return over_rest, over_grpc

    def v2_metadata(self, model: str, version: int | None) -> tuple[Any, Any]:
        path = f"/v2/models/{model}" + (f"/versions/{version}" if version is not None else "")
        code, body = self.rest_get(path)
        over_rest = (code, body if code == 200 else None)
        stub = v2_grpc.GRPCInferenceServiceStub(self.channel)
        try:
            response = stub.ModelMetadata(
                v2.ModelMetadataRequest(name=model, version=str(version or "")), timeout=30
            )
        except grpc.RpcError as error:
            return over_rest, (grpc_status(error), None)

        def tensors(entries: Any) -> list[dict[str, Any]]:
            return [
                {"name": t.name, "datatype": t.datatype, "shape": list(t.shape)} for t in entries
            ]

        fields = {
            "name": response.name,
            "versions": list(response.versions),
            "platform": response.platform,
            "inputs": tensors(response.inputs),
            "outputs": tensors(response.outputs),
        }
        return over_rest, (200, fields)

    def v2_config(self, model: str, version: int | None) -> tuple[Any, Any]:
        path = f"/v2/models/{model}" + (f"/versions/{version}" if version is not None else "")
        code, body = self.rest_get(f"{path}/config")
        over_rest = (code, body if code == 200 else None)
        stub = v2_grpc.GRPCInferenceServiceStub(self.channel)
        try:
            response = stub.ModelConfig(
                v2.ModelConfigRequest(name=model, version=str(version or "")), timeout=30
            )
        except grpc.RpcError as error:
            return over_rest, (grpc_status(error), None)
        config = response.config

        def tensors(entries: Any) -> list[dict[str, Any]]:
            return [
                {
                    "name": t.name,
                    "data_type": triton_config.DataType.Name(t.data_type),
                    "dims": list(t.dims),
                }
                for t in entries
            ]

        fields = {
            "name": config.name,
            "platform": config.platform,
            "backend": config.backend,
            "max_batch_size": config.max_batch_size,
            "input": tensors(config.input),
            "output": tensors(config.output),
            "model_transaction_policy": {"decoupled": config.model_transaction_policy.decoupled},
        }
        return over_rest, (200, fields)

    def answers(self, question: Question) -> dict[str, tuple[Any, Any]]:
        """Each question's (REST answer, gRPC answer)."""
        model, version, label = question
        found: dict[str, tuple[Any, Any]] = {
            "status": self.status(model, version, label),
            "metadata": self.tfs_metadata(model, version, label),
        }
        if label is None:  # V2 names versions only
            found["ready"] = self.model_ready(model, version)
            found["v2 metadata"] = self.v2_metadata(model, version)
            found["v2 config"] = self.v2_config(model, version)
        return found


@pytest.fixture
def both(tmp_path: Path) -> Iterator[Both]:
    """m (labels stable → 1, canary → 2, which does not exist), broken, and an in-flight limit 1."""
    m = attrs.evolve(write_model(tmp_path, "m"), version_labels={"stable": 1, "canary": 2})
    options = attrs.evolve(
        TEST_SERVER_CORE_OPTIONS,
        start_degraded=True,
        allow_version_labels_for_unavailable_models=True,
        max_requests_in_flight_per_model=1,
    )
    core = ServerCore(ModelServerConfig([m, write_model(tmp_path, "broken", broken=True)]), options)
    rest, grpc_server = LocalRestServer(core), LocalGrpcServer(core)
    channel = grpc.insecure_channel(grpc_server.target)
    try:
        yield Both(core, rest, grpc_server, channel)
    finally:
        channel.close()
        rest.close()
        grpc_server.close()
        core.close()


QUESTIONS: list[Question] = [
    ("m", None, None),
    ("m", 1, None),
    ("m", 9, None),  # unknown version
    ("m", None, "stable"),  # a label to an available version
    ("m", None, "canary"),  # a label to a version that does not exist
    ("m", None, "nosuch"),  # no such label
    ("broken", None, None),  # failed
    ("broken", 1, None),
    ("nope", None, None),  # unknown model
    ("nope", 1, None),
]


def assert_same(both: Both, questions: list[Question]) -> dict[Question, dict[str, Any]]:
    """Asks every question over both protocols; asserts the answers agree; returns REST's."""
    answers = {}
    for question in questions:
        for what, (over_rest, over_grpc) in both.answers(question).items():
            assert over_rest == over_grpc, (
                f"{what} of {question}: REST {over_rest}, gRPC {over_grpc}"
            )
            answers.setdefault(question, {})[what] = over_rest
    return answers


def test_rest_and_grpc_agree_for_available_failed_and_unknown_models(both: Both) -> None:
    """Available, failed and unknown models, unknown versions and labels: one answer for both."""
    answers = assert_same(both, QUESTIONS)
    assert answers[("m", None, None)]["ready"] is True
    assert answers[("m", 9, None)]["ready"] is False
    assert answers[("nope", None, None)]["ready"] is False
    assert answers[("broken", None, None)]["ready"] is False
    assert answers[("m", None, "stable")]["metadata"] == (200, 1, ["serving_default"])
    assert answers[("m", None, "canary")]["status"][0] == 404  # labelled version unknown
    assert answers[("m", None, "nosuch")]["status"][0] == 400
    config = answers[("m", None, None)]["v2 config"][1]
    assert config["platform"] == config["backend"] == "python"


def test_a_model_at_its_in_flight_limit_answers_every_question_as_when_idle(
    both: Both, tmp_path: Path
) -> None:
    """Requests in flight at the limit change no answer: readiness, status, labels, metadata."""
    idle = assert_same(both, QUESTIONS[:5])
    hold = tmp_path / "m" / "HOLD"
    hold.write_text("")
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        try:
            held = pool.submit(
                httpx.post,
                f"{both.rest.url}/v1/models/m:predict",
                json={"instances": [1.0]},
                timeout=60,
            )
            wait_until((tmp_path / "m" / "CALLED").exists, timeout_s=30)
            refused = httpx.post(
                f"{both.rest.url}/v1/models/m:predict", json={"instances": [1.0]}, timeout=30
            )
            assert refused.status_code == 503  # the limit holds for inference
            busy = assert_same(both, QUESTIONS[:5])
        finally:  # a failed assertion must not leave the call waiting forever
            hold.unlink(missing_ok=True)
        assert held.result(timeout=60).status_code == 200
    assert busy == idle


def test_rest_and_grpc_agree_on_a_model_loading_and_one_unloading(
    both: Both, tmp_path: Path
) -> None:
    """A model still loading and a version unloading under a running call: one answer for both."""
    m = both.core.config.model("m")
    assert m is not None
    slow = write_model(tmp_path, "slow", wait=True)
    errors: list[ServingError] = []

    def reload(models: list[ModelConfig]) -> None:
        try:
            both.core.reload_config(ModelServerConfig(models))
        except ServingError as error:
            errors.append(error)

    try:
        adding = threading.Thread(target=reload, args=([m, slow],))
        adding.start()
        wait_until(lambda: both.core.list_models() == ["m", "slow"], timeout_s=30)
        loading = assert_same(both, [("slow", None, None), ("slow", 1, None)])
        assert loading[("slow", None, None)]["ready"] is False
        (tmp_path / "slow" / "1" / "WAIT").unlink()
        adding.join(30)
        assert errors == []

        (tmp_path / "slow" / "HOLD").write_text("")
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            held = pool.submit(
                httpx.post,
                f"{both.rest.url}/v1/models/slow:predict",
                json={"instances": [1.0]},
                timeout=60,
            )
            wait_until((tmp_path / "slow" / "CALLED").exists, timeout_s=30)
            removing = threading.Thread(target=reload, args=([m],))
            removing.start()
            wait_until(
                lambda: both.core.model_status("slow").versions[0].state.value == "UNLOADING",
                timeout_s=30,
            )
            unloading = assert_same(both, [("slow", None, None), ("slow", 1, None)])
            assert unloading[("slow", 1, None)]["status"][1][0][1] == "UNLOADING"
            (tmp_path / "slow" / "HOLD").unlink()
            assert held.result(timeout=60).status_code == 200
            removing.join(30)
    finally:  # a failed assertion must not leave the model's load or call waiting forever
        for flag in (tmp_path / "slow" / "1" / "WAIT", tmp_path / "slow" / "HOLD"):
            flag.unlink(missing_ok=True)


def test_the_repository_index_is_one_list_for_both(both: Both) -> None:
    """REST and gRPC list the same models, removed ones too, with the same states."""
    both.core.unload_model("broken")

    def over_rest(ready: bool) -> list[tuple[str, str, str]]:
        response = httpx.post(
            f"{both.rest.url}/v2/repository/index", json={"ready": ready}, timeout=30
        )
        return [(row["name"], row.get("version", ""), row["state"]) for row in response.json()]

    def over_grpc(ready: bool) -> list[tuple[str, str, str]]:
        stub = v2_grpc.GRPCInferenceServiceStub(both.channel)
        index = stub.RepositoryIndex(v2.RepositoryIndexRequest(ready=ready), timeout=30)
        return [(row.name, row.version, row.state) for row in index.models]

    assert over_rest(False) == over_grpc(False)
    assert ("broken", "1", "UNAVAILABLE") in over_rest(False)  # removed, still known
    assert over_rest(True) == over_grpc(True) == [("m", "1", "READY")]
