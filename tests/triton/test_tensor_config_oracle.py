"""Triton 2.51 and servinglib read an input's ``optional`` and a tensor's ``reshape`` alike:
an optional input may be left out (the model sees None), a required one may not; the model
sees an input in its ``reshape`` and the client gets an output in its ``dims``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from tests.triton.clients import PROTOCOLS, Clients
from tests.triton.oracle import running_triton, skip_without_triton
from tests.triton.pipeline_models import write
from tests.triton.servinglib_serving import serving_repository

OPTIONAL_CONFIG = """
backend: "python"
max_batch_size: 4
input [
  { name: "A" data_type: TYPE_FP32 dims: [ 2 ] },
  { name: "B" data_type: TYPE_FP32 dims: [ 2 ] optional: true }
]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 2 ] } ]
{batching}
"""

OPTIONAL_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "A").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "B")
            y = a * 10 if b is None else a + b.as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", y)]))
        return responses
"""

RESHAPED_CONFIG = """
backend: "python"
max_batch_size: 2
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] reshape: { shape: [ 2, 2 ] } } ]
output [
  { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] reshape: { shape: [ 2, 2 ] } },
  { name: "SEEN" data_type: TYPE_INT32 dims: [ 3 ] }
]
"""

RESHAPED_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            seen = np.array([x.shape] * x.shape[0], dtype=np.int32)
            y = np.ascontiguousarray(np.transpose(x, (0, 2, 1)))
            responses.append(
                pb_utils.InferenceResponse([pb_utils.Tensor("Y", y), pb_utils.Tensor("SEEN", seen)])
            )
        return responses
"""

A = np.array([[1.0, 2.0]], np.float32)
B = np.array([[0.5, 0.25]], np.float32)
EXCHANGES: list[tuple[str, dict[str, np.ndarray]]] = [
    ("optional", {"A": A, "B": B}),
    ("optional", {"A": A}),
    ("optional", {"B": B}),
    ("optional_batched", {"A": A, "B": B}),
    ("optional_batched", {"A": A}),
    ("reshaped", {"X": np.arange(8, dtype=np.float32).reshape(2, 4)}),
    ("reshaped", {"X": np.arange(3, dtype=np.float32).reshape(1, 3)}),
]


def _answers(clients: Clients) -> list[Any]:
    return [
        clients.infer(protocol, model, inputs)
        for protocol in PROTOCOLS
        for model, inputs in EXCHANGES
    ]


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Any]]:
    skip_without_triton()
    repository = tmp_path_factory.mktemp("repository")
    write(repository, "optional", OPTIONAL_CONFIG.replace("{batching}", ""), OPTIONAL_PY)
    batched = OPTIONAL_CONFIG.replace("{batching}", "dynamic_batching { }")
    write(repository, "optional_batched", batched, OPTIONAL_PY)
    write(repository, "reshaped", RESHAPED_CONFIG, RESHAPED_PY)
    found = {}
    with (
        running_triton(repository, tmp_path_factory.mktemp("triton")) as triton,
        Clients(triton.http_url, triton.grpc_url) as clients,
    ):
        found["theirs"] = _answers(clients)
    with (
        serving_repository(repository) as serving,
        Clients(serving.http_url, serving.grpc_url) as clients,
    ):
        found["ours"] = _answers(clients)
    return found


def test_optional_inputs_and_reshapes_answer_as_triton(answers: dict[str, list[Any]]) -> None:
    """The same answers and error codes, but for a request leaving out the required input
    where Triton 2.51 checks only how many inputs came: it hands the request to the model
    (whose ``execute`` then fails, 500); servinglib refuses it, 400 naming the input."""
    theirs, ours = answers["theirs"], answers["ours"]
    for index, (mine, triton) in enumerate(zip(ours, theirs, strict=True)):
        model, inputs = EXCHANGES[index % len(EXCHANGES)]
        if sorted(inputs) == ["B"]:
            assert triton["error"] in ("500", "StatusCode.INTERNAL"), triton
            assert mine["error"] in ("400", "StatusCode.INVALID_ARGUMENT"), mine
            assert mine["message"] == "Missing input tensor 'A': the signature takes {A, B}"
        elif "error" in triton:
            assert mine["error"] == triton["error"], (model, sorted(inputs), mine, triton)
        else:
            assert mine == triton, (model, sorted(inputs))
    http = dict(enumerate(ours[: len(EXCHANGES)]))
    assert http[0] == {"outputs": {"Y": [[1.5, 2.25]]}}
    assert http[1] == {"outputs": {"Y": [[10.0, 20.0]]}}
    seen, transposed = [[2, 2, 2], [2, 2, 2]], [[0.0, 2.0, 1.0, 3.0], [4.0, 6.0, 5.0, 7.0]]
    assert http[5] == {"outputs": {"SEEN": seen, "Y": transposed}}
    assert http[6]["error"] == "400"
