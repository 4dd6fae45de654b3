"""Differential tests of dynamic batching: Triton's and servinglib's execute() lists agree.

Concurrent clients send one-row requests to a Python model with ``dynamic_batching`` (a long
queue delay, a preferred batch size), served from a Triton repository by both; what is stable
is compared: every answer (each request its own parameters, requested outputs and error), the
bounds of the lists execute() gets, the rows counted.  How many requests each list holds is
not: Triton may add requests to a batch formed while its instance was busy.
"""

from __future__ import annotations

import json
import queue
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc
import tritonclient.http
from tritonclient.utils import InferenceServerException

from servinglib.server import ModelServerConfig
from servinglib.server.triton_repository import TritonRepository
from tests.triton.clients import PROTOCOLS
from tests.triton.oracle import running_triton, skip_without_triton
from tests.triton.python_models import write_batch_recorder
from tests.triton.servinglib_serving import serving_repository

pytestmark = pytest.mark.timeout(300)

MODEL = "batch_recorder"
CLIENTS = 8
MAX_BATCH_SIZE = 8  # the batch recorder's
PREFERRED = 4
# Long enough that every client's request is queued before it passes: batches run at the
# preferred size, not at the delay.
DYNAMIC_BATCHING = f"max_queue_delay_microseconds: 5000000 preferred_batch_size: [ {PREFERRED} ]"


@pytest.fixture(scope="module", params=[1, 2], ids=["one instance", "two instances"])
def urls(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[dict[str, tuple[str, str]]]:
    """Triton's and servinglib's HTTP and gRPC addresses, serving the batch recorder with one
    instance, then with two (model processes: batches formed in front of them, each run on
    a free one, each request's parameters carried to it)."""
    skip_without_triton()
    repository = tmp_path_factory.mktemp("repository")
    write_batch_recorder(repository, DYNAMIC_BATCHING, instances=request.param)
    with (
        running_triton(repository, tmp_path_factory.mktemp("work")) as triton,
        serving_repository(
            repository, config=ModelServerConfig([TritonRepository(repository).model(MODEL)])
        ) as serving,
    ):
        yield {
            "theirs": (triton.http_url, triton.grpc_url),
            "ours": (serving.http_url, serving.grpc_url),
        }


def _send_together(
    protocol: str, http_url: str, grpc_url: str, *, failing: bool = True
) -> list[dict[str, Any]]:
    """CLIENTS requests in flight at once on one shared client: X = -1 for the last when
    ``failing`` (its model fails it), parameters {"i": i}, odd ones asking for SEEN only;
    their answers."""
    module: Any = tritonclient.http if protocol == "http" else tritonclient.grpc
    client = (
        tritonclient.http.InferenceServerClient(http_url, concurrency=CLIENTS)
        if protocol == "http"
        else tritonclient.grpc.InferenceServerClient(grpc_url)
    )
    done: queue.SimpleQueue[tuple[int, Any, Any]] = queue.SimpleQueue()
    pending = []
    try:
        for i in range(CLIENTS):
            x = np.array([[-1 if failing and i == CLIENTS - 1 else i]], dtype=np.int32)
            tensor = module.InferInput("X", [1, 1], "INT32")
            tensor.set_data_from_numpy(x)
            names = ["SEEN"] if i % 2 else ["SEEN", "Y"]
            outputs = [module.InferRequestedOutput(name) for name in names]
            kwargs = {"outputs": outputs, "parameters": {"i": i}}
            if protocol == "http":
                pending.append(client.async_infer(MODEL, [tensor], **kwargs))
            else:
                client.async_infer(
                    MODEL,
                    [tensor],
                    callback=lambda result, error, i=i: done.put((i, result, error)),
                    **kwargs,
                )
        if protocol == "http":
            for i, request in enumerate(pending):
                try:
                    done.put((i, request.get_result(), None))
                except InferenceServerException as error:
                    done.put((i, None, error))
        answers: list[dict[str, Any]] = [{} for _ in range(CLIENTS)]
        for _ in range(CLIENTS):
            i, result, error = done.get(timeout=60)
            answers[i] = _answer(result, error)
        return answers
    finally:
        client.close()


def _answer(result: Any, error: InferenceServerException | None) -> dict[str, Any]:
    if error is not None:
        return {"error": error.status(), "negative": "negative input" in error.message()}
    seen = json.loads(result.as_numpy("SEEN")[0][0])
    y = result.as_numpy("Y")
    return {"seen": seen, "y": None if y is None else y.tolist()}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_concurrent_requests_reach_execute_in_preferred_lists_alike(
    urls: dict[str, tuple[str, str]], protocol: str
) -> None:
    """Both hand execute() the concurrent requests in lists of the preferred size, each
    answered with its own parameters and outputs, the failing one failing alone."""
    theirs = _send_together(protocol, *urls["theirs"])
    ours = _send_together(protocol, *urls["ours"])

    assert _stable(ours) == _stable(theirs)
    assert theirs[-1] == {"error": theirs[-1]["error"], "negative": True}
    for answers in (theirs, ours):
        for answer in answers[:-1]:
            seen = answer["seen"]
            assert 1 <= seen["requests"] == seen["rows"] <= MAX_BATCH_SIZE
        assert max(answer["seen"]["requests"] for answer in answers[:-1]) > 1


def _stable(answers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The answers without how many requests and rows their execute() got."""
    return [
        {**answer, "seen": {k: v for k, v in answer["seen"].items() if k not in _UNSTABLE}}
        if "seen" in answer
        else answer
        for answer in answers
    ]


_UNSTABLE = ("requests", "rows")


def test_statistics_count_rows_and_executions_alike(urls: dict[str, tuple[str, str]]) -> None:
    """After a round of concurrent requests, both count its rows, and fewer executions."""
    counts = {}
    for server, (http_url, grpc_url) in urls.items():
        client = tritonclient.http.InferenceServerClient(http_url)
        try:
            before = client.get_inference_statistics(MODEL)["model_stats"][0]
            _send_together("http", http_url, grpc_url, failing=False)
            after = client.get_inference_statistics(MODEL)["model_stats"][0]
        finally:
            client.close()
        counts[server] = (
            after["inference_count"] - before["inference_count"],
            after["execution_count"] - before["execution_count"],
        )

    for inferences, executions in counts.values():
        assert inferences == CLIENTS
        assert CLIENTS // MAX_BATCH_SIZE <= executions < CLIENTS, counts


def test_the_served_configs_agree_on_dynamic_batching(urls: dict[str, tuple[str, str]]) -> None:
    """Both answer the model's config with the dynamic_batching it was written with."""
    configs = {}
    for server, (http_url, _) in urls.items():
        client = tritonclient.http.InferenceServerClient(http_url)
        try:
            configs[server] = client.get_model_config(MODEL)["dynamic_batching"]
        finally:
            client.close()

    assert configs["ours"]["preferred_batch_size"] == [PREFERRED]
    assert configs["ours"] == configs["theirs"]
