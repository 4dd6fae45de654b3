"""Malformed messages, protos side by side with the official ones, and the public API."""

from __future__ import annotations

import random
import subprocess
import sys
import typing

import grpc
import numpy as np
import pytest
import tritonclient.grpc as triton
from grpc_servers import Served
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc
from tritonclient.utils import InferenceServerException

import servinglib.server.grpc as public
from servinglib.protos import predict_pb2 as our_predict_pb2

METHODS = [
    "/tensorflow.serving.PredictionService/Predict",
    "/tensorflow.serving.PredictionService/Classify",
    "/tensorflow.serving.PredictionService/GetModelMetadata",
    "/tensorflow.serving.ModelService/GetModelStatus",
    "/inference.GRPCInferenceService/ModelInfer",
    "/inference.GRPCInferenceService/ModelMetadata",
]
CLIENT_CODES = {
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.FAILED_PRECONDITION,
}


@pytest.mark.parametrize("method", METHODS)
def test_malformed_bytes_are_client_errors(served: Served, method: str) -> None:
    """Random and truncated request bytes never give INTERNAL, and the server keeps serving."""
    rng = random.Random(method)
    valid = our_predict_pb2.PredictRequest()
    valid.model_spec.name = "py"
    valid.inputs["x"].dtype = 1
    valid.inputs["x"].tensor_shape.dim.add(size=2)
    valid.inputs["x"].float_val.extend([1.0, 2.0])
    data = valid.SerializeToString()
    bodies = [bytes(rng.getrandbits(8) for _ in range(rng.randrange(1, 64))) for _ in range(30)]
    bodies += [data[:cut] for cut in range(1, len(data))]
    with served.channel() as channel:
        call = channel.unary_unary(method)
        codes = [_code_of(call, body) for body in bodies]
        assert not [c for c in codes if c not in CLIENT_CODES and c != grpc.StatusCode.OK]
        stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
        request = predict_pb2.PredictRequest()
        request.ParseFromString(data)
        assert list(stub.Predict(request, timeout=30).outputs["y"].float_val) == [2.0, 3.0]


def _code_of(call: grpc.UnaryUnaryMultiCallable, body: bytes) -> grpc.StatusCode:
    try:
        call(body, timeout=30)
    except grpc.RpcError as error:
        return error.code()
    return grpc.StatusCode.OK


def test_a_megabyte_model_name_is_answered_with_a_short_message(served: Served) -> None:
    """A 1 MB model name is NOT_FOUND with a message under 2 KB, not grpc's RESOURCE_EXHAUSTED."""
    name = "n" * 1_000_000
    client = triton.InferenceServerClient(served.address)
    tensor = triton.InferInput("x", [1], "FP32")
    tensor.set_data_from_numpy(np.ones(1, np.float32))
    answers = []
    for call in (
        lambda: client.infer(name, [tensor], client_timeout=60),
        lambda: client.get_model_metadata(name, client_timeout=60),
    ):
        with pytest.raises(InferenceServerException) as caught:
            call()
        answers.append((caught.value.status(), str(caught.value.message())))
    client.close()
    request = predict_pb2.PredictRequest()
    request.model_spec.name = name
    with served.channel() as channel, pytest.raises(grpc.RpcError) as error:
        prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict(request, timeout=60)
    answers.append((str(error.value.code()), error.value.details() or ""))
    assert {code for code, _ in answers} == {"StatusCode.NOT_FOUND"}
    assert all(len(message.encode()) <= 2048 for _, message in answers)


def test_our_protos_and_the_official_ones_share_a_process() -> None:
    """Importing our protos beside tensorflow-serving-api and tritonclient raises no clash."""
    code = (
        "import servinglib.server.grpc\n"
        "from servinglib.protos import grpc_service_pb2, health_pb2, model_management_pb2\n"
        "from tensorflow_serving.apis import model_service_pb2_grpc, prediction_service_pb2_grpc\n"
        "import tritonclient.grpc\n"
        "from grpc_health.v1 import health_pb2 as official_health\n"
        "from servinglib.protos import get_model_status_pb2, ssl_config_pb2\n"
    )
    completed = subprocess.run(
        [sys.executable, "-W", "error", "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={"TF_CPP_MIN_LOG_LEVEL": "3", "PATH": ""},
    )
    assert completed.returncode == 0, completed.stderr


def test_wire_compatible_predict_request() -> None:
    """Our PredictRequest and TF Serving's encode the same request to the same bytes."""
    ours = our_predict_pb2.PredictRequest()
    ours.model_spec.name = "m"
    ours.model_spec.version.value = 3
    ours.inputs["x"].tensor_content = np.arange(3, dtype="<f4").tobytes()
    theirs = predict_pb2.PredictRequest.FromString(ours.SerializeToString())
    assert theirs.model_spec.version.value == 3
    assert theirs.SerializeToString(deterministic=True) == ours.SerializeToString(
        deterministic=True
    )


def test_public_api_is_sorted_and_final() -> None:
    """The package's __all__ is plainly sorted and its concrete classes are final."""
    assert public.__all__ == sorted(public.__all__)
    for name in public.__all__:
        value = getattr(public, name)
        if isinstance(value, type):
            assert getattr(value, "__final__", False), name
    assert typing.get_type_hints(public.create_server)


def test_import_servinglib_does_not_import_grpc() -> None:
    """``import servinglib`` leaves grpc and the gRPC front end unimported."""
    code = (
        "import sys, servinglib\n"
        "assert 'grpc' not in sys.modules\n"
        "assert 'servinglib.server.grpc' not in sys.modules\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert completed.returncode == 0, completed.stderr
