"""BLS: Triton Python models calling other models through servinglib, over REST and gRPC."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from servinglib.server import ModelServerConfig
from servinglib.server.triton_repository import TritonRepository
from tests.triton.clients import PROTOCOLS, Clients
from tests.triton.pipeline_models import (
    write_bls_models,
    write_bls_timeout_models,
    write_pipeline_repository,
)
from tests.triton.servinglib_serving import serving_repository

X = np.array([1.0, 2.0], dtype=np.float32)


@pytest.fixture(scope="module")
def clients(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clients]:
    """Clients of servinglib serving the pipeline repository and the BLS callers, with
    the timeout test models."""
    repository = tmp_path_factory.mktemp("repository")
    write_pipeline_repository(repository, tmp_path_factory.mktemp("rendezvous"))
    write_bls_models(repository)
    write_bls_timeout_models(repository)
    config = ModelServerConfig(TritonRepository(repository).scan().models)
    with (
        serving_repository(repository, config=config) as serving,
        Clients(serving.http_url, serving.grpc_url) as both,
    ):
        yield both


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_exec_calls_models_one_after_another(clients: Clients, protocol: str) -> None:
    """exec() returns the callee's response: double(pre(x))."""
    assert clients.infer(protocol, "bls_sync", {"IN": X}) == {"outputs": {"OUT": [4.0, 6.0]}}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_async_exec_is_awaited_in_an_async_execute(clients: Clients, protocol: str) -> None:
    """async def execute awaits two async_exec() calls together: pre(x) + double(x)."""
    assert clients.infer(protocol, "bls_async", {"IN": X}) == {"outputs": {"OUT": [4.0, 7.0]}}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_exec_decoupled_yields_the_callees_responses(clients: Clients, protocol: str) -> None:
    """exec(decoupled=True) yields each response of the decoupled callee."""
    answer = clients.infer(protocol, "bls_decoupled", {"IN": np.array([3, 4, 5], np.float32)})
    assert answer == {"outputs": {"OUT": [12.0]}}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_async_exec_decoupled_gives_the_callees_responses_then_an_empty_one(
    clients: Clients, protocol: str
) -> None:
    """await async_exec(decoupled=True) gives repeat's three responses and the empty final
    one, iterated with for as Triton's README does."""
    answer = clients.infer(protocol, "bls_async_decoupled", {"IN": np.array([3, 4, 5], np.float32)})
    assert answer == {"outputs": {"OUT": [12.0, 4.0]}}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_bls_timeout_fails_the_callees_call_and_the_caller_goes_on(
    clients: Clients, protocol: str
) -> None:
    """InferenceRequest(timeout=50 ms) of a callee taking a second: its response has the
    deadline's error, and the caller's next call (double) answers."""
    answer = clients.infer(protocol, "bls_timeout", {"IN": X})
    assert answer == {"outputs": {"OUT": [1.0, 2.0, 4.0]}}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_callees_error_code_reaches_the_caller(clients: Clients, protocol: str) -> None:
    """has_error()/error() carry the callee's code: pre's INVALID_ARG reaches the client as
    INVALID_ARGUMENT (Triton 2.51 turns it into INTERNAL; the Python backend's 2025 fix not)."""
    answer = clients.infer(protocol, "bls_sync", {"IN": np.array([-1.0], np.float32)})
    assert answer["error"] in {"400", "StatusCode.INVALID_ARGUMENT"}
    assert "negative input" in answer["message"]
