"""Triton 2.51 and servinglib schedule a dynamically batched model's queue alike: requests by
priority level (the V2 ``priority`` parameter), a level's queue timeout rejecting a request
with Triton's code and words, a request's own ``timeout`` shortening it where the policy
allows, a level's ``max_queue_size``.

The model holds its first ``execute`` until the test writes a file (Triton runs it in another
process), so that the requests sent meanwhile queue; every request is answered with the list
of requests its ``execute`` got, in order.
"""

from __future__ import annotations

import concurrent.futures
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.triton.clients import Clients
from tests.triton.oracle import running_triton, skip_without_triton
from tests.triton.pipeline_models import write
from tests.triton.servinglib_serving import serving_repository

MODEL_PY = """
import json
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils

GATE = {gate!r}


class TritonPythonModel:
    def execute(self, requests):
        xs = [int(pb_utils.get_input_tensor_by_name(r, "X").as_numpy()[0, 0]) for r in requests]
        if 0 in xs:  # the request that holds the model until the test opens the gate
            open(GATE + ".entered", "w").close()
            for _ in range(3000):
                if os.path.exists(GATE):
                    break
                time.sleep(0.01)
        order = np.array([[json.dumps(xs).encode()]] * len(requests), dtype=object)
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("ORDER", order[i : i + 1])])
            for i in range(len(requests))
        ]
"""

CONFIG = """
backend: "python"
max_batch_size: 16
input [ {{ name: "X" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "ORDER" data_type: TYPE_STRING dims: [ 1 ] }} ]
dynamic_batching {{ {batching} }}
"""

MODELS = {
    "priorities": (
        "priority_levels: 3 default_priority_level: 2 "
        "priority_queue_policy { key: 3 value: { max_queue_size: 1 } }"
    ),
    "timeouts": (
        "default_queue_policy { default_timeout_microseconds: 300000 allow_timeout_override: true }"
    ),
}

# (X, request options) in the order sent while the model is held
PRIORITY_REQUESTS = [
    (30, {"priority": 3}),
    (20, {}),
    (10, {"priority": 1}),
    (31, {"priority": 3}),  # past level 3's max_queue_size
    (21, {"priority": 2}),
    (22, {"priority": 9}),  # out of range: the default level
    (11, {"priority": 1}),
]
TIMEOUT_REQUESTS = [
    (1, {}),  # waits past the policy's 300 ms
    (2, {"timeout": 50_000}),  # its own 50 ms: sooner
    (3, {"timeout": 60_000_000}),  # cannot lengthen the policy's
]


def _exchange(clients: Clients, gate: Path, model: str, requests: list[Any]) -> list[Any]:
    """Holds ``model``, sends ``requests`` one after another (gRPC), waits half a second, opens
    the gate: each request's answer, in the order sent."""
    gate.unlink(missing_ok=True)
    Path(f"{gate}.entered").unlink(missing_ok=True)

    def send(x: int, options: dict[str, Any]) -> Any:
        inputs = {"X": np.array([[x]], np.int32)}
        answer = clients.infer("grpc", model, inputs, **options)  # (its channel is shared)
        if "outputs" in answer:
            return json.loads(answer["outputs"]["ORDER"][0])
        return answer

    with concurrent.futures.ThreadPoolExecutor(len(requests) + 1) as pool:
        held = pool.submit(send, 0, {})
        try:
            _wait(lambda: Path(f"{gate}.entered").exists())
            sent = []
            for x, options in requests:
                sent.append(pool.submit(send, x, options))
                time.sleep(0.1)  # arrival order: one request on its way at a time
            time.sleep(0.5)  # every timeout but the 60 s one passes
        finally:
            gate.touch()
        return [held.result(30), *(future.result(30) for future in sent)]


def _wait(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.01)  # another process's file: no event to wait on


@pytest.fixture(scope="module")
def answers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Triton's answers and servinglib's, by model."""
    skip_without_triton()
    repository = tmp_path_factory.mktemp("repository")
    gate = tmp_path_factory.mktemp("gate") / "open"
    for name, batching in MODELS.items():
        write(repository, name, CONFIG.format(batching=batching), MODEL_PY.format(gate=str(gate)))
    found: dict[str, Any] = {}
    lock = threading.Lock()

    def run(who: str, clients: Clients) -> None:
        with lock:
            found[who] = {
                "priorities": _exchange(clients, gate, "priorities", PRIORITY_REQUESTS),
                "timeouts": _exchange(clients, gate, "timeouts", TIMEOUT_REQUESTS),
            }

    with (
        running_triton(repository, tmp_path_factory.mktemp("triton")) as triton,
        Clients(triton.http_url, triton.grpc_url) as clients,
    ):
        run("theirs", clients)
    with (
        serving_repository(repository) as serving,
        Clients(serving.http_url, serving.grpc_url) as clients,
    ):
        run("ours", clients)
    return found


def test_requests_are_taken_by_priority_level_as_triton_takes_them(
    answers: dict[str, Any],
) -> None:
    """Level 1's requests first, then the default level's (2, and an out-of-range priority),
    then level 3's, each in arrival order; level 3's second request is refused at once,
    UNAVAILABLE in Triton's words (without the request id Triton puts before them)."""
    theirs, ours = answers["theirs"]["priorities"], answers["ours"]["priorities"]
    full = "Exceeds maximum queue size"
    assert theirs[4] == {
        "error": "StatusCode.UNAVAILABLE",
        "message": f"[request id: <id_unknown>] {full}",
    }
    theirs[4]["message"] = full
    assert ours == theirs
    batch = [10, 11, 20, 21, 22, 30]
    assert ours == [[0], batch, batch, batch, theirs[4], batch, batch, batch]


def test_a_queue_timeout_rejects_as_triton_rejects(answers: dict[str, Any]) -> None:
    """The policy's 300 ms and a request's own 50 ms both pass while the model is held: both
    fail UNAVAILABLE, "Request timeout expired"; a request asking for 60 s keeps the policy's
    300 ms and fails too."""
    theirs, ours = answers["theirs"]["timeouts"], answers["ours"]["timeouts"]
    assert ours == theirs
    refused = {"error": "StatusCode.UNAVAILABLE", "message": "Request timeout expired"}
    assert ours == [[0], refused, refused, refused]
