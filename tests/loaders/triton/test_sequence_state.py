"""Implicit state of a Triton sequence model: kept by the server per sequence."""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from servinglib.errors import InvalidArgumentError
from servinglib.loaders.triton.config import read_model_config
from servinglib.loaders.triton.sequence_state import SequenceStates
from tests.triton.clients import PROTOCOLS, Clients
from tests.triton.sequence_models import step_input, total, write_stateful
from tests.triton.servinglib_serving import Serving, serving_repository

pytestmark = pytest.mark.timeout(120)

INITIAL_100 = 'data_type: TYPE_INT32 dims: [ 1 ] data_file: "hundred" name: "hundred"'


@pytest.fixture(scope="module")
def serving(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serving]:
    """servinglib serving the stateful sum starting at zeros ("stateful") and at 100 from a
    data file ("from_file")."""
    repository = tmp_path_factory.mktemp("repository")
    write_stateful(repository)
    model_dir = write_stateful(repository, "from_file", INITIAL_100)
    (model_dir / "initial_state").mkdir()
    (model_dir / "initial_state" / "hundred").write_bytes(np.int32(100).tobytes())
    with serving_repository(repository) as serving:
        yield serving


def _sequence(
    clients: Clients, protocol: str, model: str, sequence_id: int, values: list[int]
) -> list[int]:
    answers = [
        clients.infer(
            protocol,
            model,
            step_input(value),
            sequence_id=sequence_id,
            sequence_start=step == 0,
            sequence_end=step == len(values) - 1,
        )
        for step, value in enumerate(values)
    ]
    return [total(answer) for answer in answers]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_interleaved_sequences_each_keep_their_own_state(serving: Serving, protocol: str) -> None:
    """Eight sequences at once each get their own running sum from state the server keeps,
    which no client sees as an output."""
    barrier = threading.Barrier(8)

    def run(sequence: int) -> list[int]:
        with Clients(serving.http_url, serving.grpc_url) as clients:
            barrier.wait(timeout=30)
            return _sequence(clients, protocol, "stateful", 500 + sequence, [sequence, 1, 2, 3])

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(run, range(8)))

    assert results == [[s, s + 1, s + 3, s + 6] for s in range(8)]
    with Clients(serving.http_url, serving.grpc_url) as clients:
        answer = clients.infer(
            protocol,
            "stateful",
            step_input(1),
            sequence_id=9,
            sequence_start=True,
            sequence_end=True,
        )
    assert set(answer["outputs"]) == {"OUTPUT"}


def test_a_sequence_starts_from_the_initial_state_again_after_its_end(serving: Serving) -> None:
    """State is dropped at END: the same id started again begins at the initial state (a data
    file's 100 here), not where it ended."""
    with Clients(serving.http_url, serving.grpc_url) as clients:
        first = _sequence(clients, "grpc", "from_file", 77, [1, 2])
        again = _sequence(clients, "grpc", "from_file", 77, [5])

    assert (first, again) == ([101, 103], [105])


def _states(tmp_path: Path, initial_state: str) -> SequenceStates:
    model_dir = write_stateful(tmp_path, "m", initial_state)
    return SequenceStates(read_model_config(model_dir), str(model_dir))


def test_zero_data_and_no_initial_state_start_at_zeros_with_a_batch_dimension(
    tmp_path: Path,
) -> None:
    """Without initial_state, and with zero_data, a sequence starts at zeros shaped [1, 1]."""
    for initial in ("", 'data_type: TYPE_INT32 dims: [ 1 ] zero_data: true name: "z"'):
        states = _states(tmp_path / str(len(initial)), initial)
        (state,) = states.inputs(None).values()
        assert state.tolist() == [[0]]


def test_a_data_file_outside_the_initial_state_directory_or_of_the_wrong_size_is_refused(
    tmp_path: Path,
) -> None:
    """A data_file of "../config.pbtxt", or one holding 3 bytes, fails the load naming it."""
    escape = 'data_type: TYPE_INT32 dims: [ 1 ] data_file: "../config.pbtxt" name: "x"'
    with pytest.raises(InvalidArgumentError, match="is not in initial_state/"):
        _states(tmp_path / "escape", escape)
    model_dir = write_stateful(tmp_path, "short", INITIAL_100)
    (model_dir / "initial_state").mkdir()
    (model_dir / "initial_state" / "hundred").write_bytes(b"abc")
    with pytest.raises(InvalidArgumentError, match="holds 3 bytes"):
        SequenceStates(read_model_config(model_dir), str(model_dir))
