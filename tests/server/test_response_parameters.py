"""Response parameters a model sets reach the client in the V2 response, over REST and gRPC.

One servinglib (REST and gRPC on 127.0.0.1) serves a python-platform model that calls
``set_response_parameters`` and Triton Python models that give ``parameters`` to their
``pb_utils.InferenceResponse`` (one of them batched dynamically); tritonclient calls them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.grpc
import tritonclient.http
from tritonclient.utils import InferenceServerException

from servinglib.protos import grpc_service_pb2
from servinglib.testing import write_python_model
from tests.triton.clients import PROTOCOLS, Clients
from tests.triton.pipeline_models import write
from tests.triton.servinglib_serving import serving_repository

PYTHON_MODEL = """
import numpy as np
from servinglib.loaders import PythonModel, signature
from servinglib.request_extras import request_extras
from servinglib.response_extras import set_response_headers, set_response_parameters
from servinglib.servable import TensorSpec

class Model(PythonModel):
    @signature(name="serving_default", inputs=[TensorSpec("X", "int32", [-1])],
               outputs=[TensorSpec("Y", "int32", [-1])])
    def predict(self, X):
        tag = request_extras().parameters.get("tag")
        if tag == "reserved":
            set_response_parameters({"triton_final_response": False})
        elif tag == "headers":
            set_response_headers({"X-Model-Trace": "abc-123", "cache-control": "no-store"})
        elif tag == "server-header":
            set_response_headers({"content-length": "1"})
        elif tag is not None:
            set_response_parameters({"tag": tag, "rows": int(X.shape[0]), "ok": True})
            set_response_parameters({"score": 0.5})
        return {"Y": X * 2}
"""

TRITON_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "Y" data_type: TYPE_INT32 dims: [ -1 ] } ]
"""

TRITON_BATCHED_CONFIG = """
backend: "python"
max_batch_size: 8
input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_INT32 dims: [ 1 ] } ]
dynamic_batching { }
"""

TRITON_MODEL = """
import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            tag = json.loads(request.parameters()).get("tag", "")
            parameters = {"tag": tag, "rows": int(x.shape[0])} if tag else {}
            if tag == "reserved":
                parameters = {"binary_data_size": 1}
            y = pb_utils.Tensor("Y", x * 2)
            responses.append(pb_utils.InferenceResponse([y], parameters=parameters))
        return responses
"""

X = np.array([1, 2, 3], dtype=np.int32)


@pytest.fixture(scope="module", params=["sync", "aio"])
def clients(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Clients]:
    """tritonclient.http and .grpc clients of servinglib serving the three models (on each of
    the two gRPC servers)."""
    repository = tmp_path_factory.mktemp("repository")
    write_python_model(repository, "python_model", PYTHON_MODEL)
    write(repository, "triton_model", TRITON_CONFIG, TRITON_MODEL)
    write(repository, "triton_batched", TRITON_BATCHED_CONFIG, TRITON_MODEL)
    with (
        serving_repository(repository, request.param) as serving,
        Clients(serving.http_url, serving.grpc_url) as both,
    ):
        yield both


def _infer(clients: Clients, protocol: str, model: str, **options: Any) -> dict[str, Any]:
    """The response's parameters (as plain values) and its Y output."""
    module = tritonclient.http if protocol == "http" else tritonclient.grpc
    x = X.reshape(3, 1) if model == "triton_batched" else X
    tensor = module.InferInput("X", list(x.shape), "INT32")
    tensor.set_data_from_numpy(x)
    result = clients.client(protocol).infer(model, [tensor], **options)
    response = result.get_response()
    if protocol == "http":
        parameters = dict(response.get("parameters", {}))
    else:
        parameters = {
            name: getattr(value, value.WhichOneof("parameter_choice"))
            for name, value in response.parameters.items()
        }
    return {"parameters": parameters, "Y": result.as_numpy("Y").reshape(-1).tolist()}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_python_models_response_parameters_reach_the_client(
    clients: Clients, protocol: str
) -> None:
    """set_response_parameters, called twice on the call's pool thread, gives the response
    parameters of every type beside the outputs."""
    answer = _infer(clients, protocol, "python_model", parameters={"tag": "t1"})

    assert answer == {
        "parameters": {"tag": "t1", "rows": 3, "ok": True, "score": 0.5},
        "Y": [2, 4, 6],
    }


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("model", ["triton_model", "triton_batched"])
def test_a_triton_python_models_response_parameters_reach_the_client(
    clients: Clients, protocol: str, model: str
) -> None:
    """pb_utils.InferenceResponse(..., parameters=...) gives the V2 response's parameters,
    dynamically batched too."""
    answer = _infer(clients, protocol, model, parameters={"tag": f"t-{protocol}"})

    assert answer == {"parameters": {"tag": f"t-{protocol}", "rows": 3}, "Y": [2, 4, 6]}


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("model", ["python_model", "triton_model"])
def test_a_response_that_sets_no_parameters_has_none(
    clients: Clients, protocol: str, model: str
) -> None:
    """No parameters set: the response carries no parameters (its wire form is unchanged)."""
    assert _infer(clients, protocol, model)["parameters"] == {}


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("model", ["python_model", "triton_model"])
def test_a_reserved_response_parameter_fails_the_request_naming_it(
    clients: Clients, protocol: str, model: str
) -> None:
    """A model cannot set the protocol's triton_final_response or binary_data_size: its
    request fails naming the parameter (the python model's ValueError is UNKNOWN, as any
    exception it raises; a Triton model's response is INTERNAL, as a malformed one is)."""
    with pytest.raises(InferenceServerException, match="is reserved by the protocol") as raised:
        _infer(clients, protocol, model, parameters={"tag": "reserved"})

    grpc_code = "StatusCode.UNKNOWN" if model == "python_model" else "StatusCode.INTERNAL"
    assert raised.value.status() == ("500" if protocol == "http" else grpc_code)


def test_rest_json_places_parameters_beside_the_outputs(clients: Clients) -> None:
    """The REST answer is V2 JSON with a response-level parameters object."""
    body = {
        "parameters": {"tag": "json"},
        "inputs": [{"name": "X", "datatype": "INT32", "shape": [3], "data": [1, 2, 3]}],
    }
    url = f"http://{clients.http_url}/v2/models/python_model/infer"

    answer = httpx.post(url, json=body).json()

    assert answer["parameters"] == {"tag": "json", "rows": 3, "ok": True, "score": 0.5}
    assert answer["outputs"][0]["data"] == [2, 4, 6]


def test_a_models_response_headers_reach_rest_and_grpc_clients(clients: Clients) -> None:
    """set_response_headers: HTTP headers over REST (names lower-cased), trailing metadata
    over gRPC ModelInfer."""
    body = {
        "parameters": {"tag": "headers"},
        "inputs": [{"name": "X", "datatype": "INT32", "shape": [3], "data": [1, 2, 3]}],
    }
    answer = httpx.post(f"http://{clients.http_url}/v2/models/python_model/infer", json=body)
    assert answer.status_code == 200
    assert answer.headers["x-model-trace"] == "abc-123"
    assert answer.headers["cache-control"] == "no-store"

    request = grpc_service_pb2.ModelInferRequest(model_name="python_model")
    request.parameters["tag"].string_param = "headers"
    request.inputs.add(name="X", datatype="INT32", shape=[3])
    request.raw_input_contents.append(X.tobytes())
    with grpc.insecure_channel(clients.grpc_url) as channel:
        call = channel.unary_unary(
            "/inference.GRPCInferenceService/ModelInfer",
            request_serializer=grpc_service_pb2.ModelInferRequest.SerializeToString,
            response_deserializer=grpc_service_pb2.ModelInferResponse.FromString,
        )
        _response, rpc = call.with_call(request, timeout=30)
    trailers = dict(rpc.trailing_metadata() or ())
    assert trailers["x-model-trace"] == "abc-123"


def test_a_header_the_server_writes_cannot_be_set_by_the_model(clients: Clients) -> None:
    """content-length (the server's) fails the call naming the header; no response carries it."""
    body = {
        "parameters": {"tag": "server-header"},
        "inputs": [{"name": "X", "datatype": "INT32", "shape": [3], "data": [1, 2, 3]}],
    }
    answer = httpx.post(f"http://{clients.http_url}/v2/models/python_model/infer", json=body)
    assert answer.status_code >= 500
    assert "content-length" in answer.json()["error"]
