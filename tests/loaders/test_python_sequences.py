"""A PythonModel's stateful signature: sequences served as Triton serves them, without its API."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator

import numpy as np
import pytest

from servinglib.errors import InvalidArgumentError
from servinglib.loaders import PythonModel, PythonServable, Sequences, signature
from servinglib.servable import TensorSpec
from servinglib.server import ModelSpec
from servinglib.testing import wait_until, write_python_model
from tests.triton.clients import PROTOCOLS, Clients
from tests.triton.servinglib_serving import Serving, serving_repository

ACCUMULATOR = """
import numpy as np
from servinglib.loaders import PythonModel, PythonServable, Sequences, signature
from servinglib.server import ModelSpec
from servinglib.request_extras import request_extras
from servinglib.servable import TensorSpec

OUTPUTS = [TensorSpec("total", "int32", [1]), TensorSpec("flags", "int32", [3])]

class Model(PythonModel):
    @signature(name="serving_default", inputs=[TensorSpec("x", "int32", [1])], outputs=OUTPUTS,
               sequences=Sequences(slots=8, max_sequence_idle_s=0.5, concurrency=2))
    def accumulate(self, x, *, state, start, end):
        total = x if state is None else state + x
        sequence = int(request_extras().correlation_id)
        flags = np.array([int(start), int(end), sequence], np.int32)
        return {"total": total, "flags": flags}, total
"""


@pytest.fixture(scope="module")
def serving(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serving]:
    repository = tmp_path_factory.mktemp("repository")
    write_python_model(repository, "accumulator", ACCUMULATOR)
    with serving_repository(repository) as serving:
        yield serving


def _step(clients: Clients, protocol: str, sequence: int, value: int, **flags: bool) -> dict:
    x = np.array([value], np.int32)
    return clients.infer(protocol, "accumulator", {"x": x}, sequence_id=sequence, **flags)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_interleaved_sequences_each_get_their_own_running_sums(
    serving: Serving, protocol: str
) -> None:
    """Eight sequences from eight threads, steps interleaved, each sums its own values, and
    the method sees START on the first step and END on the last."""
    values = [1, 2, 3, 4, 5]

    def run(sequence: int) -> list[dict]:
        with Clients(serving.http_url, serving.grpc_url) as clients:
            answers = []
            for index, value in enumerate(values):
                first, last = index == 0, index == len(values) - 1
                answers.append(
                    _step(
                        clients,
                        protocol,
                        sequence,
                        value * sequence,
                        sequence_start=first,
                        sequence_end=last,
                    )
                )
            return answers

    sequences = range(101, 109)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = dict(zip(sequences, pool.map(run, sequences), strict=True))
    for sequence, answers in results.items():
        totals = [int(a["outputs"]["total"][0]) for a in answers]
        assert totals == [sequence * s for s in (1, 3, 6, 10, 15)]
        flags = [a["outputs"]["flags"] for a in answers]
        assert flags[0] == [1, 0, sequence]
        assert flags[-1] == [0, 1, sequence]
        assert all(f == [0, 0, sequence] for f in flags[1:-1])


def test_a_step_outside_an_active_sequence_is_refused_naming_it(serving: Serving) -> None:
    """No sequence id, or a sequence never started, is INVALID_ARGUMENT naming the sequence."""
    with Clients(serving.http_url, serving.grpc_url) as clients:
        never = _step(clients, "grpc", 7, 1)
        assert never["error"] == "StatusCode.INVALID_ARGUMENT"
        assert "7" in never["message"]
        assert "START" in never["message"]
        unnamed = clients.infer("grpc", "accumulator", {"x": np.array([1], np.int32)})
        assert unnamed["error"] == "StatusCode.INVALID_ARGUMENT"


def test_an_idle_sequence_ends_and_its_state_is_gone(serving: Serving) -> None:
    """After max_sequence_idle_s without a step, the sequence ended: its next step without
    START is refused, and START begins again from no state."""
    with Clients(serving.http_url, serving.grpc_url) as clients:
        assert _step(clients, "grpc", 21, 5, sequence_start=True)["outputs"]["total"] == [5]

        with serving.core.servable_handle(ModelSpec.latest("accumulator")) as handle:
            servable = handle.servable
        assert isinstance(servable, PythonServable)
        wait_until(lambda: servable.sequence_gauge()[0] == 0, timeout_s=30)  # (not a step)
        assert "error" in _step(clients, "grpc", 21, 1)
        again = _step(clients, "grpc", 21, 2, sequence_start=True, sequence_end=True)
        assert again["outputs"]["total"] == [2]


def test_a_stateful_signature_must_be_a_plain_method() -> None:
    """A stateful generator (a stream) is refused when declared, naming the signature."""
    with pytest.raises(InvalidArgumentError, match=r"'steps'.*stateful"):

        class _Model(PythonModel):
            @signature(
                inputs=[TensorSpec("x", "int32", [1])],
                outputs=[TensorSpec("y", "int32", [1])],
                sequences=Sequences(),
            )
            def steps(self, x, *, state, start, end):
                yield {"y": x}


def test_sequences_options_map_onto_the_direct_strategy() -> None:
    """slots spread over the concurrency's threads; idle time and backlog carried over."""
    options = Sequences(slots=10, max_sequence_idle_s=2.0, max_backlog=3, concurrency=4).options()
    assert (options.instances, options.slots, options.max_batch_size) == (4, 3, 3)
    assert (options.max_sequence_idle_s, options.max_backlog) == (2.0, 3)
    with pytest.raises(ValueError, match="slots"):
        Sequences(slots=0)
