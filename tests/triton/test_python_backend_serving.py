"""Tests of Triton Python-backend models served by servinglib, called with tritonclient.

One server (REST and gRPC on 127.0.0.1) serves the repository of tests/triton/python_models.py
for the module; each test calls it as tritonclient's users do.
"""

from __future__ import annotations

import concurrent.futures
import json
from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from tests.triton.clients import PROTOCOLS, Clients
from tests.triton.python_models import write_repository
from tests.triton.servinglib_serving import serving_repository

A = np.array([[1, 2, 3, 4], [10, 20, 30, 40]], dtype=np.float32)
B = np.array([[4, 3, 2, 1], [1, 1, 1, 1]], dtype=np.float32)

# The status each protocol answers with, by gRPC code name: tritonclient.http's status() is
# the HTTP status, tritonclient.grpc's the gRPC code.
STATUS = {
    "INVALID_ARGUMENT": {"http": "400", "grpc": "StatusCode.INVALID_ARGUMENT"},
    "INTERNAL": {"http": "500", "grpc": "StatusCode.INTERNAL"},
    "NOT_FOUND": {"http": "404", "grpc": "StatusCode.NOT_FOUND"},
}


@pytest.fixture(scope="module", params=["sync", "aio"])
def clients(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Clients]:
    """tritonclient.http and .grpc clients of servinglib serving the repository (on each of
    the two gRPC servers)."""
    repository = tmp_path_factory.mktemp("repository")
    write_repository(repository)
    with (
        serving_repository(repository, request.param) as serving,
        Clients(serving.http_url, serving.grpc_url) as both,
    ):
        yield both


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_add_sub_answers_both_clients(clients: Clients, protocol: str) -> None:
    """add_sub, written for Triton, answers tritonclient's infer over HTTP and gRPC."""
    answer = clients.infer(protocol, "add_sub", {"INPUT0": A, "INPUT1": B})

    assert answer == {"outputs": {"OUTPUT0": (A + B).tolist(), "OUTPUT1": (A - B).tolist()}}


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize(
    ("inputs", "named"),
    [
        ({"INPUT0": A, "INPUT1": B, "EXTRA": A}, "EXTRA"),
        ({"INPUT0": A}, "INPUT1"),
        ({"INPUT0": A.astype(np.int32), "INPUT1": B}, "INPUT0"),
        ({"INPUT0": A[:, :3], "INPUT1": B}, "INPUT0"),
    ],
    ids=["unknown", "missing", "dtype", "shape"],
)
def test_requests_that_do_not_fit_the_config_are_invalid_arguments(
    clients: Clients, protocol: str, inputs: dict[str, np.ndarray], named: str
) -> None:
    """An unknown or missing input, a wrong dtype or shape: INVALID_ARGUMENT naming the tensor."""
    answer = clients.infer(protocol, "add_sub", inputs)

    assert answer["error"] == STATUS["INVALID_ARGUMENT"][protocol]
    assert named in answer["message"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_triton_error_reaches_the_client_with_its_code(clients: Clients, protocol: str) -> None:
    """TritonError(msg, NOT_FOUND) in a response fails that request with 404 / NOT_FOUND."""
    answer = clients.infer(protocol, "errors", {"CODE": np.array([2], np.int32)})

    assert answer == {"error": STATUS["NOT_FOUND"][protocol], "message": "failed with code 2"}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_exception_from_execute_is_internal(clients: Clients, protocol: str) -> None:
    """A model raising from execute fails the request with 500 / INTERNAL."""
    answer = clients.infer(protocol, "errors", {"CODE": np.array([-1], np.int32)})

    assert answer["error"] == STATUS["INTERNAL"][protocol]
    assert "execute gave up" in answer["message"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_model_reads_the_request_s_id_parameters_and_outputs(
    clients: Clients, protocol: str
) -> None:
    """request_id(), parameters() and requested_output_names() are what the client sent."""
    answer = clients.infer(
        protocol,
        "recorder",
        {"IN": np.array([b"x"], dtype=object)},
        outputs=["REQUEST"],
        request_id="req-7",
        parameters={"p_str": "x", "p_int": 3, "p_bool": True},
    )

    assert list(answer["outputs"]) == ["REQUEST"]
    assert json.loads(answer["outputs"]["REQUEST"][0]) == {
        "request_id": "req-7",
        "correlation_id": 0,
        "parameters": {"p_str": "x", "p_int": 3, "p_bool": True},
        "requested_output_names": ["REQUEST"],
        "is_cancelled": False,
    }


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_bytes_tensors_round_trip(clients: Clients, protocol: str) -> None:
    """BYTES in and out: the model sees bytes items, the client gets bytes back."""
    text = np.array([b"ab", b"", "é".encode()], dtype=object)

    answer = clients.infer(protocol, "bytes_echo", {"TEXT": text})

    assert answer == {"outputs": {"LENGTH": [2, 0, 2], "UPPER": ["AB", "", "é"]}}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_model_without_config_pbtxt_is_described_by_its_auto_complete(
    clients: Clients, protocol: str
) -> None:
    """auto_complete_config's tensors are the metadata's, and the model answers."""
    metadata = clients.metadata(protocol, "auto")
    answer = clients.infer(protocol, "auto", {"X": np.array([[1, 2]], np.float32)})

    assert metadata["inputs"] == [{"name": "X", "datatype": "FP32", "shape": [-1, 2]}]
    assert metadata["outputs"] == [{"name": "Y", "datatype": "FP32", "shape": [-1, 2]}]
    assert answer == {"outputs": {"Y": [[2.0, 3.0]]}}


def test_a_decoupled_model_streams_over_model_stream_infer(clients: Clients) -> None:
    """The repeat model's responses arrive over gRPC ModelStreamInfer, then the final flag."""
    answers = clients.stream("repeat", {"IN": np.array([5, 6, 7], np.int32)})
    empty = clients.stream("repeat", {"IN": np.zeros((0,), np.int32)})

    assert answers == [{"outputs": {"IDX": [i], "OUT": [v]}} for i, v in enumerate([5, 6, 7])]
    assert empty == []


def test_a_decoupled_model_streams_over_rest_generate_stream(clients: Clients) -> None:
    """The repeat model's responses arrive as generate_stream's server-sent events."""
    url = f"http://{clients.http_url}/v2/models/repeat/generate_stream"

    response = httpx.post(url, json={"IN": [5, 6]})

    events = [json.loads(line[5:]) for line in response.text.splitlines() if line]
    assert response.status_code == 200
    assert [(e["OUT"], e["IDX"]) for e in events] == [(5, 0), (6, 1)]


def test_concurrent_requests_on_one_channel_each_see_their_own(clients: Clients) -> None:
    """Requests from many threads over one gRPC client each reach execute with their own id
    and parameters, and get their own answer."""

    def ask(index: int) -> tuple[int, dict[str, object]]:
        answer = clients.infer(
            "grpc",
            "recorder",
            {"IN": np.array([b"x"], dtype=object)},
            outputs=["REQUEST"],
            request_id=f"req-{index}",
            parameters={"index": index},
        )
        return index, json.loads(answer["outputs"]["REQUEST"][0])

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        seen = list(pool.map(ask, range(200)))

    for index, request in seen:
        assert (request["request_id"], request["parameters"]) == (f"req-{index}", {"index": index})


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_odd_and_large_parameters_reach_the_model_intact(clients: Clients, protocol: str) -> None:
    """A parameter holding NUL, CR/LF, '..' or a megabyte reaches parameters() as sent."""
    parameters = {"odd": "a\x00b\r\nc/../d", "big": "x" * 1_000_000, "é\n": "v"}

    answer = clients.infer(
        protocol,
        "recorder",
        {"IN": np.array([b"x"], dtype=object)},
        outputs=["REQUEST"],
        parameters=parameters,
    )

    assert json.loads(answer["outputs"]["REQUEST"][0])["parameters"] == parameters
