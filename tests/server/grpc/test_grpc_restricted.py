"""Restricted API groups over gRPC: each group locked and open, with the official clients."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import tritonclient.grpc as triton
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_servers import Served, serving
from tensorflow_serving.apis import (
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from servinglib.server.auth import GRPC_METHOD_GROUPS, ApiGroup, RestrictedApis
from servinglib.server.server_core import ServerCore
from servinglib.testing import wait_until

KEY = "admin-key"
METADATA_KEY = f"triton-grpc-protocol-{KEY}"
TOKEN = "grpc-secret-0123456789"
WRONG = "grpc-guess-9876543210"

Headers = dict[str, str]
Call = Callable[[grpc.Channel, triton.InferenceServerClient, Headers], None]


def tfs_predict(channel: grpc.Channel, _client: object, headers: Headers) -> None:
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "python_half_plus_two"
    request.inputs["x"].dtype = 1  # DT_FLOAT
    request.inputs["x"].tensor_shape.dim.add().size = 1
    request.inputs["x"].float_val.append(1.0)
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    stub.Predict(request, timeout=30, metadata=list(headers.items()))


def tfs_metadata(channel: grpc.Channel, _client: object, headers: Headers) -> None:
    request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
    request.model_spec.name = "python_half_plus_two"
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    stub.GetModelMetadata(request, timeout=30, metadata=list(headers.items()))


def tfs_status(channel: grpc.Channel, _client: object, headers: Headers) -> None:
    request = get_model_status_pb2.GetModelStatusRequest()
    request.model_spec.name = "python_half_plus_two"
    stub = model_service_pb2_grpc.ModelServiceStub(channel)
    stub.GetModelStatus(request, timeout=30, metadata=list(headers.items()))


def health_check(channel: grpc.Channel, _client: object, headers: Headers) -> None:
    stub = health_pb2_grpc.HealthStub(channel)
    stub.Check(health_pb2.HealthCheckRequest(), timeout=30, metadata=list(headers.items()))


def health_watch(channel: grpc.Channel, _client: object, headers: Headers) -> None:
    stub = health_pb2_grpc.HealthStub(channel)
    watch = stub.Watch(health_pb2.HealthCheckRequest(), timeout=30, metadata=list(headers.items()))
    next(watch)
    watch.cancel()


def stream_infer(channel: grpc.Channel, _client: object, headers: Headers) -> None:
    request = service_pb2.ModelInferRequest(model_name="python_half_plus_two")
    request.inputs.add(name="x", datatype="FP32", shape=[1])
    request.raw_input_contents.append(np.array([1.0], np.float32).tobytes())
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    responses = stub.ModelStreamInfer(iter([request]), timeout=30, metadata=list(headers.items()))
    [response] = list(responses)
    assert not response.error_message


def v2_infer(_channel: object, client: triton.InferenceServerClient, headers: Headers) -> None:
    x = triton.InferInput("x", [1], "FP32")
    x.set_data_from_numpy(np.array([1.0], np.float32))
    client.infer("python_half_plus_two", [x], headers=headers, client_timeout=30)


def v2(method: str, *args: str) -> Call:
    """A tritonclient call ``method(*args, headers=...)``, which raises on an error status."""

    def call(_channel: object, client: triton.InferenceServerClient, headers: Headers) -> None:
        getattr(client, method)(*args, headers=headers)

    call.__name__ = method
    return call


CALLS: dict[ApiGroup, list[Call]] = {
    ApiGroup.HEALTH: [
        v2("is_server_live"),
        v2("is_server_ready"),
        v2("is_model_ready", "python_half_plus_two"),
        tfs_status,
        health_check,
        health_watch,
    ],
    ApiGroup.METADATA: [
        v2("get_server_metadata"),
        v2("get_model_metadata", "python_half_plus_two"),
        tfs_metadata,
    ],
    ApiGroup.INFERENCE: [v2_infer, tfs_predict, stream_infer],
    ApiGroup.MODEL_CONFIG: [v2("get_model_config", "python_half_plus_two")],
    ApiGroup.MODEL_REPOSITORY: [v2("get_model_repository_index")],
    ApiGroup.STATISTICS: [v2("get_inference_statistics", "python_half_plus_two")],
}


def refusal(call: Call, channel: grpc.Channel, client: object, headers: Headers) -> str:
    """The status code name ``call`` fails with ("OK" when it succeeds)."""
    try:
        call(channel, client, headers)  # type: ignore[arg-type]
    except grpc.RpcError as error:
        return str(error.code().name)  # type: ignore[attr-defined]
    except InferenceServerException as error:
        return str(error.status()).removeprefix("StatusCode.")
    return "OK"


@pytest.fixture
def served_with(core: ServerCore, server_kind: str) -> Iterator[Callable[[RestrictedApis], Served]]:
    """Starts a server of the module's kind with the given restrictions; stops it after."""
    contexts: list[object] = []

    def serve(restricted: RestrictedApis) -> Served:
        context = serving(core, server=server_kind, restricted_apis=restricted)
        contexts.append(context)
        return context.__enter__()

    yield serve
    for context in reversed(contexts):
        context.__exit__(None, None, None)  # type: ignore[attr-defined]


@pytest.mark.parametrize("locked", list(CALLS), ids=lambda group: group.value)
def test_each_group_locked_alone(
    served_with: Callable[[RestrictedApis], Served], locked: ApiGroup
) -> None:
    """The locked group's RPCs are UNAUTHENTICATED without the metadata, PERMISSION_DENIED
    with another value, served with it; the other groups stay open (one channel, one
    tritonclient, as clients share them)."""
    served = served_with(RestrictedApis.grpc([f"{locked.value}:{KEY}={TOKEN}"]))
    client = triton.InferenceServerClient(served.address)
    with served.channel() as channel:
        for call in CALLS[locked]:
            name = call.__name__
            assert refusal(call, channel, client, {}) == "UNAUTHENTICATED", name
            assert refusal(call, channel, client, {METADATA_KEY: WRONG}) == "PERMISSION_DENIED"
            assert refusal(call, channel, client, {METADATA_KEY: TOKEN}) == "OK", name
            assert refusal(call, channel, client, {KEY: TOKEN}) == "UNAUTHENTICATED", name
        for group, calls in CALLS.items():
            for call in calls if group is not locked else ():
                assert refusal(call, channel, client, {}) == "OK", call.__name__
    client.close()


def test_health_stays_open_when_every_other_group_is_locked(
    served_with: Callable[[RestrictedApis], Served],
) -> None:
    """Locking every group but health leaves the health RPCs (and grpc.health.v1) open."""
    others = ",".join(group.value for group in ApiGroup if group is not ApiGroup.HEALTH)
    served = served_with(RestrictedApis.grpc([f"{others}:{KEY}={TOKEN}"]))
    client = triton.InferenceServerClient(served.address)
    with served.channel() as channel:
        for call in CALLS[ApiGroup.HEALTH]:
            assert refusal(call, channel, client, {}) == "OK", call.__name__
        for group in CALLS.keys() - {ApiGroup.HEALTH}:
            for call in CALLS[group]:
                assert refusal(call, channel, client, {}) == "UNAUTHENTICATED", call.__name__
    client.close()


def test_refusals_are_recorded_and_never_show_the_credential(
    served_with: Callable[[RestrictedApis], Served], caplog: pytest.LogCaptureFixture
) -> None:
    """A refused RPC is reported (its code) and no credential reaches the log or records."""
    served = served_with(RestrictedApis.grpc([f"inference:{KEY}={TOKEN}"]))
    client = triton.InferenceServerClient(served.address)
    with caplog.at_level(logging.DEBUG), served.channel() as channel:
        for headers in ({METADATA_KEY: WRONG}, {METADATA_KEY: TOKEN}, {}):
            for call in CALLS[ApiGroup.INFERENCE]:
                refusal(call, channel, client, headers)
    client.close()
    codes = [record.code.name for record in served.records if record.method == "Predict"]
    assert sorted(codes) == ["OK", "PERMISSION_DENIED", "UNAUTHENTICATED"]
    seen = caplog.text + repr(served.records)
    assert TOKEN not in seen
    assert WRONG not in seen


def test_a_rotated_token_file_takes_effect_on_the_next_rpc(
    served_with: Callable[[RestrictedApis], Served], tmp_path: Path
) -> None:
    """KEY=@PATH: replacing the file admits the new token on the same channel, no restart."""
    token = tmp_path / "token"
    token.write_text("first\n")
    served = served_with(RestrictedApis.grpc([f"inference:{KEY}=@{token}"]))
    with served.channel() as channel:
        assert refusal(tfs_predict, channel, None, {METADATA_KEY: "first"}) == "OK"
        (tmp_path / "next").write_text("second\n")
        (tmp_path / "next").replace(token)
        # The file is looked at once a second (RECHECK_INTERVAL_S): wait for the new token.
        wait_until(
            lambda: refusal(tfs_predict, channel, None, {METADATA_KEY: "second"}) == "OK",
            timeout_s=10,
        )
        assert refusal(tfs_predict, channel, None, {METADATA_KEY: "first"}) == "PERMISSION_DENIED"


def test_every_method_served_has_a_group(served: Served) -> None:
    """Every RPC the server registers is in the table (restricting all groups starts a
    server; a method missing from the table would fail create_server)."""
    assert {name.split("/")[0] for name in GRPC_METHOD_GROUPS} == {
        "tensorflow.serving.PredictionService",
        "tensorflow.serving.ModelService",
        "inference.GRPCInferenceService",
        "grpc.health.v1.Health",
    }
    every = ",".join(group.value for group in ApiGroup)
    with serving(served.server.plane.core, restricted_apis=RestrictedApis.grpc([f"{every}:k=v"])):
        pass
