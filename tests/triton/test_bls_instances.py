"""Models whose instances are model processes: BLS calls crossing back to the server, and the
request's id and parameters reaching the instance from every front end."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest

from servinglib.server import ModelServerConfig
from servinglib.server.triton_repository import TritonRepository
from tests.triton.clients import PROTOCOLS, Clients
from tests.triton.pipeline_models import (
    BLS_ASYNC,
    BLS_DECOUPLED,
    BLS_PY,
    BLS_SYNC,
    BLS_TIMEOUT,
    SLOW_PY,
    UNARY_CONFIG,
    write,
    write_pipeline_repository,
)
from tests.triton.python_models import write_recorder, write_repeat
from tests.triton.servinglib_serving import Serving, serving_repository

X = np.array([1.0, 2.0], dtype=np.float32)
TWO_INSTANCES = "instance_group [ { count: 2 kind: KIND_CPU } ]"


@pytest.fixture(scope="module")
def serving(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Serving, Clients]]:
    """servinglib serving the pipeline's models and BLS callers with two instances each (two
    model processes), the callees in the server's process."""
    repository = tmp_path_factory.mktemp("repository")
    write_pipeline_repository(repository, tmp_path_factory.mktemp("rendezvous"))
    write_repeat(repository)
    recorder = write_recorder(repository, "recorder_instances")
    with (recorder / "config.pbtxt").open("a") as config_file:
        config_file.write(TWO_INSTANCES + "\n")
    write(repository, "slow", UNARY_CONFIG.format(extra=""), SLOW_PY)
    for name, body in (
        ("bls_sync", BLS_SYNC),
        ("bls_async", BLS_ASYNC),
        ("bls_timeout", BLS_TIMEOUT),
        ("bls_decoupled", BLS_DECOUPLED),
    ):
        config = UNARY_CONFIG.format(extra=TWO_INSTANCES)
        write(repository, name, config, BLS_PY.format(body=body.strip()))
    config = ModelServerConfig(TritonRepository(repository).scan().models)
    with (
        serving_repository(repository, config=config) as serving,
        Clients(serving.http_url, serving.grpc_url) as both,
    ):
        yield serving, both


@pytest.fixture
def clients(serving: tuple[Serving, Clients]) -> Clients:
    """tritonclient's HTTP and gRPC clients of the server (one thread at a time)."""
    return serving[1]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_exec_from_a_model_process_calls_served_models(clients: Clients, protocol: str) -> None:
    """exec() in an instance's process: double(pre(x)), run by the server."""
    assert clients.infer(protocol, "bls_sync", {"IN": X}) == {"outputs": {"OUT": [4.0, 6.0]}}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_async_exec_from_a_model_process_runs_its_calls_together(
    clients: Clients, protocol: str
) -> None:
    """Two async_exec() calls awaited together from one execute: pre(x) + double(x)."""
    assert clients.infer(protocol, "bls_async", {"IN": X}) == {"outputs": {"OUT": [4.0, 7.0]}}


def test_calls_from_both_instances_at_once_are_all_answered(
    serving: tuple[Serving, Clients],
) -> None:
    """Sixteen REST requests at once over both instances (from 8 threads, a connection per
    request): every nested call comes back to the call that made it."""
    url = f"http://{serving[0].http_url}/v2/models/bls_sync/infer"

    def ask(value: float) -> list[float]:
        body = {"inputs": [{"name": "IN", "datatype": "FP32", "shape": [1], "data": [value]}]}
        reply = httpx.post(url, json=body, timeout=60)
        assert reply.status_code == 200, reply.text
        return reply.json()["outputs"][0]["data"]

    with ThreadPoolExecutor(8) as threads:
        answers = list(threads.map(ask, [float(i) for i in range(16)]))
    assert answers == [[(i + 1) * 2.0] for i in range(16)]


def test_calls_over_one_shared_grpc_channel_are_all_answered(clients: Clients) -> None:
    """Sixteen gRPC requests at once from 8 threads sharing tritonclient's one channel, as its
    users share it: every nested call comes back to the call that made it."""

    def ask(value: float) -> list[float]:
        answer = clients.infer("grpc", "bls_sync", {"IN": np.array([value], np.float32)})
        return answer["outputs"]["OUT"]

    with ThreadPoolExecutor(8) as threads:
        answers = list(threads.map(ask, [float(i) for i in range(16)]))
    assert answers == [[(i + 1) * 2.0] for i in range(16)]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_bls_timeout_in_a_model_process_bounds_the_call(clients: Clients, protocol: str) -> None:
    """The BLS request's own 50 ms timeout crosses to the server with the call: slow's call
    fails on its deadline, and the caller's next call answers."""
    answer = clients.infer(protocol, "bls_timeout", {"IN": X})
    assert answer == {"outputs": {"OUT": [1.0, 2.0, 4.0]}}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_callees_error_reaches_a_model_process(clients: Clients, protocol: str) -> None:
    """pre's INVALID_ARG comes back across the socket with its code and message."""
    answer = clients.infer(protocol, "bls_sync", {"IN": np.array([-1.0], np.float32)})
    assert answer["error"] in {"400", "StatusCode.INVALID_ARGUMENT"}
    assert "negative input" in answer["message"]


def test_a_stream_from_a_model_process_is_refused_naming_why(clients: Clients) -> None:
    """exec(decoupled=True) cannot stream across the socket: the request fails saying so."""
    answer = clients.infer("http", "bls_decoupled", {"IN": np.array([3, 4, 5], np.float32)})
    assert "cannot stream" in answer["message"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_instance_process_reads_the_request_s_id_and_parameters(
    clients: Clients, protocol: str
) -> None:
    """request_id() and parameters() in an instance's process are the client's (over REST
    the call reaches the instance from the event loop, on the placement's thread)."""
    answer = clients.infer(
        protocol,
        "recorder_instances",
        {"IN": np.array([b"x"], dtype=object)},
        outputs=["REQUEST"],
        request_id="req-9",
        parameters={"p_str": "y", "p_int": 4},
    )
    seen = json.loads(answer["outputs"]["REQUEST"][0])
    assert seen["request_id"] == "req-9"
    assert seen["parameters"] == {"p_str": "y", "p_int": 4}
