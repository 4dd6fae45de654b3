"""Differential tests of sequence batching: Triton's and servinglib's accumulators agree.

The same repository (the accumulator, direct and oldest strategies) is served by Triton 2.51
and by servinglib; eight sequences sent at once from eight threads over HTTP and gRPC get the
same running sums, the model sees the same control values (START, END, READY, CORRID,
``correlation_id()``) for each request, and requests outside a sequence fail alike.  How
requests meet in batches is not compared (it depends on timing); implicit state is left out
(Triton 2.51's Python backend mishandles it).
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from servinglib.server import ModelServerConfig
from servinglib.server.triton_repository import TritonRepository
from tests.triton.clients import PROTOCOLS, Clients
from tests.triton.oracle import running_triton, skip_without_triton
from tests.triton.sequence_models import seen, step_input, total, write_accumulator
from tests.triton.servinglib_serving import serving_repository

pytestmark = pytest.mark.timeout(300)

MODELS = ("accumulator", "oldest")
SEQUENCES = 8
STEPS = 4


@pytest.fixture(scope="module")
def urls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[str, str]]]:
    """Triton's and servinglib's HTTP and gRPC addresses, serving both accumulators."""
    skip_without_triton()
    repository = tmp_path_factory.mktemp("repository")
    write_accumulator(repository)
    write_accumulator(
        repository,
        "oldest",
        max_batch_size=4,
        strategy="oldest { max_candidate_sequences: 8 max_queue_delay_microseconds: 2000 }",
    )
    triton_repository = TritonRepository(repository)
    config = ModelServerConfig([triton_repository.model(name) for name in MODELS])
    with (
        running_triton(repository, tmp_path_factory.mktemp("work")) as triton,
        serving_repository(repository, config=config) as serving,
    ):
        yield {
            "theirs": (triton.http_url, triton.grpc_url),
            "ours": (serving.http_url, serving.grpc_url),
        }


def _comparable(answer: dict[str, Any]) -> dict[str, Any]:
    if "error" in answer:
        return answer
    controls = seen(answer)
    kept = ("start", "end", "ready", "corrid", "correlation_id")
    return {"total": total(answer), **{key: controls[key] for key in kept}}


def _interleaved(http_url: str, grpc_url: str, protocol: str, model: str) -> list[list[Any]]:
    """SEQUENCES sequences of STEPS requests sent at once from a thread each; their answers."""
    barrier = threading.Barrier(SEQUENCES)

    def run(sequence: int) -> list[Any]:
        answers = []
        with Clients(http_url, grpc_url) as clients:
            barrier.wait(timeout=60)
            for step in range(STEPS):
                answer = clients.infer(
                    protocol,
                    model,
                    step_input(sequence * 100 + step),
                    sequence_id=7000 + sequence,
                    sequence_start=step == 0,
                    sequence_end=step == STEPS - 1,
                )
                answers.append(_comparable(answer))
        return answers

    with concurrent.futures.ThreadPoolExecutor(SEQUENCES) as pool:
        return list(pool.map(run, range(SEQUENCES)))


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_interleaved_sequences_agree_with_triton(
    urls: dict[str, tuple[str, str]], protocol: str, model: str
) -> None:
    """Eight concurrent sequences get the same sums and the model sees the same controls."""
    theirs = _interleaved(*urls["theirs"], protocol, model)
    ours = _interleaved(*urls["ours"], protocol, model)

    assert ours == theirs
    assert [a["total"] for a in ours[1]] == [100, 201, 303, 406]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_requests_outside_a_sequence_fail_alike(
    urls: dict[str, tuple[str, str]], protocol: str
) -> None:
    """No sequence id, and no START for a sequence never started: the same status, and our
    message holds Triton's words."""
    answers = {}
    for side, (http_url, grpc_url) in urls.items():
        with Clients(http_url, grpc_url) as clients:
            answers[side] = [
                clients.infer(protocol, "accumulator", step_input(1)),
                clients.infer(protocol, "accumulator", step_input(1), sequence_id=8123),
            ]

    for theirs, ours in zip(answers["theirs"], answers["ours"], strict=True):
        assert ours["error"] == theirs["error"]
        assert theirs["message"].split(": ", 1)[-1] in ours["message"]
