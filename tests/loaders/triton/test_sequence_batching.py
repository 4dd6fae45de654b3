"""Triton's sequence batching of a Python model, served by servinglib to tritonclient."""

from __future__ import annotations

import concurrent.futures
import json
import logging
import os
import queue
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tritonclient.grpc

from servinglib.loaders.process import ProcessServable
from servinglib.loaders.triton.sequence_servable import TritonSequenceServable
from servinglib.server import ModelSpec
from servinglib.server.triton_repository import TritonRepository
from servinglib.testing import wait_until
from tests.triton.clients import PROTOCOLS, Clients
from tests.triton.sequence_models import seen, step_input, total, write_accumulator
from tests.triton.servinglib_serving import Serving, serving_repository

pytestmark = pytest.mark.timeout(120)

SEQUENCES = 8
STEPS = 5


def _values(sequence: int) -> list[int]:
    return [sequence * 10 + step for step in range(STEPS)]


def _running_sums(values: list[int]) -> list[int]:
    return [sum(values[: i + 1]) for i in range(len(values))]


@pytest.fixture(scope="module")
def serving(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Serving]:
    """servinglib serving accumulators: the direct strategy with 8 slots ("accumulator"), one
    slot and a short idle time ("one_slot"), a backlog of one ("bounded"), two instances of
    one slot ("two_instances"), string ids ("named"), and the oldest strategy ("oldest")."""
    repository = tmp_path_factory.mktemp("repository")
    write_accumulator(repository)
    write_accumulator(
        repository,
        "one_slot",
        max_batch_size=1,
        extra="max_sequence_idle_microseconds: 300000",
    )
    write_accumulator(
        repository,
        "bounded",
        max_batch_size=1,
        extra="max_sequence_idle_microseconds: 60000000",
        model_extra='parameters { key: "MAX_SEQUENCE_BACKLOG" value: { string_value: "1" } }',
    )
    write_accumulator(
        repository,
        "two_instances",
        max_batch_size=1,
        model_extra="instance_group [ { count: 2 kind: KIND_CPU } ]",
    )
    write_accumulator(repository, "named", corrid_type="TYPE_STRING")
    write_accumulator(repository, "gauged", max_batch_size=1)
    write_accumulator(
        repository,
        "oldest",
        strategy="oldest { max_candidate_sequences: 8 max_queue_delay_microseconds: 20000 }",
        max_batch_size=4,
    )
    with serving_repository(repository) as serving:
        yield serving


def _sequence(
    clients: Clients, protocol: str, model: str, sequence_id: int | str, values: list[int]
) -> list[dict[str, Any]]:
    answers = []
    for step, value in enumerate(values):
        answers.append(
            clients.infer(
                protocol,
                model,
                step_input(value),
                sequence_id=sequence_id,
                sequence_start=step == 0,
                sequence_end=step == len(values) - 1,
            )
        )
    return answers


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_interleaved_sequences_each_get_their_own_running_sums(
    serving: Serving, protocol: str
) -> None:
    """Eight sequences sent at once from eight threads (sharing one gRPC channel) get exactly
    their own running sums, and the model saw START on the first request only, END on the
    last only, READY always, and CORRID and correlation_id() as the sequence's id."""
    barrier = threading.Barrier(SEQUENCES)
    shared = Clients(serving.http_url, serving.grpc_url)

    def run(sequence: int) -> list[dict[str, Any]]:
        # tritonclient.http's client may not be shared by threads (gevent): one each.
        own = Clients(serving.http_url, serving.grpc_url) if protocol == "http" else shared
        barrier.wait(timeout=30)
        try:
            return _sequence(own, protocol, "accumulator", 1000 + sequence, _values(sequence))
        finally:
            if own is not shared:
                own.close()

    try:
        with concurrent.futures.ThreadPoolExecutor(SEQUENCES) as pool:
            results = list(pool.map(run, range(SEQUENCES)))
    finally:
        shared.close()

    for sequence, answers in enumerate(results):
        assert [total(a) for a in answers] == _running_sums(_values(sequence)), answers
        controls = [seen(a) for a in answers]
        assert [c["start"] for c in controls] == [1] + [0] * (STEPS - 1)
        assert [c["end"] for c in controls] == [0.0] * (STEPS - 1) + [1.0]
        assert all(c["ready"] is True for c in controls)
        assert {c["corrid"] for c in controls} == {1000 + sequence}
        assert {c["correlation_id"] for c in controls} == {1000 + sequence}


def test_interleaved_sequences_on_one_grpc_stream_get_their_own_running_sums(
    serving: Serving,
) -> None:
    """Eight sequences interleaved step by step on one ModelStreamInfer stream each get their
    own running sums (a sequence's requests answered in order)."""
    answers: queue.SimpleQueue[tuple[Any, Any]] = queue.SimpleQueue()
    client = tritonclient.grpc.InferenceServerClient(serving.grpc_url)
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        for step in range(STEPS):
            for sequence in range(SEQUENCES):
                tensor = tritonclient.grpc.InferInput("INPUT", [1, 1], "INT32")
                tensor.set_data_from_numpy(step_input(_values(sequence)[step])["INPUT"])
                client.async_stream_infer(
                    "accumulator",
                    [tensor],
                    request_id=f"{sequence}/{step}",
                    sequence_id=2000 + sequence,
                    sequence_start=step == 0,
                    sequence_end=step == STEPS - 1,
                )
        got: dict[str, int] = {}
        for _ in range(STEPS * SEQUENCES):
            result, error = answers.get(timeout=30)
            assert error is None, error
            got[result.get_response().id] = int(result.as_numpy("OUTPUT").item())
    finally:
        client.stop_stream()
        client.close()

    for sequence in range(SEQUENCES):
        sums = [got[f"{sequence}/{step}"] for step in range(STEPS)]
        assert sums == _running_sums(_values(sequence))


def test_string_sequence_ids_reach_a_string_corrid(serving: Serving) -> None:
    """A string sequence id is CORRID and correlation_id() as sent (TYPE_STRING control)."""
    with Clients(serving.http_url, serving.grpc_url) as clients:
        for protocol in PROTOCOLS:
            answers = _sequence(clients, protocol, "named", f"user-{protocol}", [1, 2, 3])
            assert [total(a) for a in answers] == [1, 3, 6]
            assert {seen(a)["corrid"] for a in answers} == {f"user-{protocol}"}
            assert {seen(a)["correlation_id"] for a in answers} == {f"user-{protocol}"}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_requests_outside_an_active_sequence_are_invalid(serving: Serving, protocol: str) -> None:
    """No sequence id, a sequence never started, one that ended, or a string id where CORRID
    is numeric: INVALID_ARGUMENT naming the sequence and the model."""
    with Clients(serving.http_url, serving.grpc_url) as clients:
        no_id = clients.infer(protocol, "accumulator", step_input(1))
        unknown = clients.infer(protocol, "accumulator", step_input(1), sequence_id=31)
        _sequence(clients, protocol, "accumulator", 32, [1, 2])
        ended = clients.infer(protocol, "accumulator", step_input(1), sequence_id=32)
        named = clients.infer(
            protocol, "accumulator", step_input(1), sequence_id="s", sequence_start=True
        )

    assert "non-zero or non-empty correlation ID" in no_id["message"]
    for answer, sequence in ((unknown, "31"), (ended, "32")):
        assert answer["error"] in {"400", "StatusCode.INVALID_ARGUMENT"}, answer
        assert f"sequence {sequence} to model 'accumulator'" in answer["message"]
        assert "must specify the START flag" in answer["message"]
    assert "takes numeric sequence ids" in named["message"]


def _batcher(serving: Serving, model: str) -> Any:
    with serving.core.servable_handle(ModelSpec.latest(model)) as handle:
        servable = handle.servable
    assert isinstance(servable, TritonSequenceServable)
    return servable.batcher


def test_an_idle_sequence_frees_its_slot_and_then_needs_a_start(serving: Serving) -> None:
    """With one slot, a second sequence waits in the backlog until the first has been idle
    for max_sequence_idle_microseconds; the first's next request without START then fails
    naming it."""
    batcher = _batcher(serving, "one_slot")
    with Clients(serving.http_url, serving.grpc_url) as clients:
        first = clients.infer("grpc", "one_slot", step_input(5, 1), sequence_id=41, **_START)
        assert total(first) == 5
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            second = pool.submit(
                Clients(serving.http_url, serving.grpc_url).infer,
                "grpc",
                "one_slot",
                step_input(7, 1),
                sequence_id=42,
                **_START,
            )
            wait_until(lambda: batcher.statistics().backlog == 1 or second.done())
            assert total(second.result(timeout=30)) == 7  # ran once 41 was idle
        late = clients.infer("grpc", "one_slot", step_input(1, 1), sequence_id=41)

    assert late["error"] == "StatusCode.INVALID_ARGUMENT"
    assert "sequence 41 to model 'one_slot'" in late["message"]


_START = {"sequence_start": True}


def test_sequences_beyond_the_backlog_bound_are_unavailable(serving: Serving) -> None:
    """With one slot and MAX_SEQUENCE_BACKLOG 1, a third sequence is UNAVAILABLE while the
    second waits; once the first ends, the second runs."""
    batcher = _batcher(serving, "bounded")
    with Clients(serving.http_url, serving.grpc_url) as clients:
        clients.infer("grpc", "bounded", step_input(1, 1), sequence_id=51, **_START)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            second = pool.submit(
                Clients(serving.http_url, serving.grpc_url).infer,
                "grpc",
                "bounded",
                step_input(2, 1),
                sequence_id=52,
                **_START,
            )
            wait_until(lambda: batcher.statistics().backlog == 1)
            third = clients.infer("grpc", "bounded", step_input(3, 1), sequence_id=53, **_START)
            assert not second.done()
            ended = clients.infer(
                "grpc", "bounded", step_input(4, 1), sequence_id=51, sequence_end=True
            )
            assert total(ended) == 5
            assert total(second.result(timeout=30)) == 2

    assert third["error"] == "StatusCode.UNAVAILABLE"
    assert "MAX_SEQUENCE_BACKLOG" in third["message"]


def test_metrics_show_active_sequences_backlog_and_slots(serving: Serving) -> None:
    """With the one slot held and a second sequence waiting, the scrape says 1 active, 1 in
    the backlog, 1 slot; once both ended, 0 and 0."""
    from servinglib.server.observe.metrics import ServerMetrics
    from servinglib.server.plane.data_plane import DataPlane

    metrics = ServerMetrics()
    plane = DataPlane(serving.core)
    metrics.attach_plane(plane)

    def series(name: str) -> str:
        text = metrics.render().decode()
        return next(
            line for line in text.splitlines() if line.startswith(name + '{model_name="gauged"}')
        )

    try:
        with Clients(serving.http_url, serving.grpc_url) as clients:
            clients.infer("grpc", "gauged", step_input(1, 1), sequence_id=71, **_START)
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                second = pool.submit(
                    Clients(serving.http_url, serving.grpc_url).infer,
                    "grpc",
                    "gauged",
                    step_input(2, 1),
                    sequence_id=72,
                    sequence_start=True,
                    sequence_end=True,
                )
                wait_until(lambda: series("servinglib_sequence_backlog").endswith(" 1.0"))
                assert series("servinglib_sequences_active").endswith(" 1.0")
                assert series("servinglib_sequence_slots").endswith(" 1.0")
                clients.infer("grpc", "gauged", step_input(3, 1), sequence_id=71, sequence_end=True)
                second.result(timeout=30)
        wait_until(lambda: series("servinglib_sequences_active").endswith(" 0.0"))
        assert series("servinglib_sequence_backlog").endswith(" 0.0")
    finally:
        plane.close()


def test_sequences_stick_to_their_instance(serving: Serving) -> None:
    """Two sequences on a model of two one-slot instances run on different instances, each
    on the same one throughout, named as Triton names them."""
    barrier = threading.Barrier(2)

    def run(sequence: int) -> list[dict[str, Any]]:
        with Clients(serving.http_url, serving.grpc_url) as clients:
            barrier.wait(timeout=30)
            return _sequence(clients, "grpc", "two_instances", 60 + sequence, [1, 2, 3, 4])

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = list(pool.map(run, range(2)))

    instances = [{seen(a)["instance"] for a in answers} for answers in results]
    assert all(len(names) == 1 for names in instances)
    assert instances[0] | instances[1] == {"two_instances_0_0", "two_instances_0_1"}
    assert all([total(a) for a in answers] == [1, 3, 6, 10] for answers in results)


def test_a_dead_instance_ends_its_sequences_and_the_other_goes_on(
    serving: Serving, caplog: pytest.LogCaptureFixture
) -> None:
    """Each instance of two_instances is a model process; killing the one holding sequence 81
    ends 81 (logged by name; its next step without START is refused) while 82, on the other
    instance, keeps its running sum."""
    with serving.core.servable_handle(ModelSpec.latest("two_instances")) as handle:
        servable = handle.servable
    assert isinstance(servable, TritonSequenceServable)
    processes = list(servable.instances)
    assert all(isinstance(p, ProcessServable) for p in processes)
    with Clients(serving.http_url, serving.grpc_url) as clients:
        first = {
            sequence: clients.infer(
                "grpc", "two_instances", step_input(1, 1), sequence_id=sequence, **_START
            )
            for sequence in (81, 82)
        }
        names = {sequence: seen(answer)["instance"] for sequence, answer in first.items()}
        assert names[81] != names[82]
        dying = processes[int(names[81].rsplit("_", 1)[1])]
        pid = dying.pid
        with caplog.at_level(logging.ERROR):
            os.kill(pid, signal.SIGKILL)
            wait_until(lambda: dying.serving and dying.pid != pid)
        assert any("sequences 81 on that instance ended" in r.getMessage() for r in caplog.records)

        lost = clients.infer("grpc", "two_instances", step_input(2, 1), sequence_id=81)
        assert lost["error"] == "StatusCode.INVALID_ARGUMENT"
        assert "81" in lost["message"]
        kept = clients.infer("grpc", "two_instances", step_input(2, 1), sequence_id=82)
        assert total(kept) == 3
        again = clients.infer(
            "grpc", "two_instances", step_input(5, 1), sequence_id=81, **_START, sequence_end=True
        )
        assert total(again) == 5
        clients.infer("grpc", "two_instances", step_input(0, 1), sequence_id=82, sequence_end=True)


def test_a_client_sequence_id_of_any_size_or_text_costs_no_slot(serving: Serving) -> None:
    """Ids a client controls (huge, NUL, CR/LF, a megabyte) without START are refused and
    leave no sequence behind."""
    batcher = _batcher(serving, "named")
    with Clients(serving.http_url, serving.grpc_url) as clients:
        for sequence_id in ("..", "a\0b", "a\r\nb", "x" * 1_000_000):
            answer = clients.infer("grpc", "named", step_input(1), sequence_id=sequence_id)
            assert answer["error"] == "StatusCode.INVALID_ARGUMENT"
            assert len(answer["message"]) < 1000
    assert batcher.statistics().active == 0


def test_the_repository_names_only_the_sequence_fields_it_does_not_apply(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A repository's Python model with sequence_batching is warned about
    iterative_sequence only, not about the sequence batching servinglib applies."""
    write_accumulator(tmp_path, "warned", extra="iterative_sequence: true")

    with caplog.at_level(logging.WARNING, "servinglib.server"):
        TritonRepository(tmp_path).model("warned")

    (warning,) = [r.getMessage() for r in caplog.records if "does not implement" in r.getMessage()]
    assert warning.endswith("have no effect: sequence_batching.iterative_sequence")


def test_oldest_batches_never_hold_two_requests_of_one_sequence(serving: Serving) -> None:
    """All steps of eight sequences queued at once on one stream: every execute() of the
    oldest strategy gets at most max_batch_size requests, each of a different sequence,
    and each sequence still gets its own running sums."""
    answers: queue.SimpleQueue[tuple[Any, Any]] = queue.SimpleQueue()
    client = tritonclient.grpc.InferenceServerClient(serving.grpc_url)
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        for sequence in range(SEQUENCES):
            for step in range(STEPS):
                tensor = tritonclient.grpc.InferInput("INPUT", [1, 1], "INT32")
                tensor.set_data_from_numpy(step_input(_values(sequence)[step])["INPUT"])
                client.async_stream_infer(
                    "oldest",
                    [tensor],
                    request_id=f"{sequence}/{step}",
                    sequence_id=3000 + sequence,
                    sequence_start=step == 0,
                    sequence_end=step == STEPS - 1,
                )
        got: dict[str, tuple[int, list[int]]] = {}
        for _ in range(STEPS * SEQUENCES):
            result, error = answers.get(timeout=30)
            assert error is None, error
            batch = json.loads(result.as_numpy("SEEN").item())["batch"]
            got[result.get_response().id] = (int(result.as_numpy("OUTPUT").item()), batch)
    finally:
        client.stop_stream()
        client.close()

    batches = [batch for _, batch in got.values()]
    assert all(len(batch) == len(set(batch)) <= 4 for batch in batches), batches
    assert max(len(batch) for batch in batches) > 1  # they did meet in batches
    for sequence in range(SEQUENCES):
        sums = [got[f"{sequence}/{step}"][0] for step in range(STEPS)]
        assert sums == _running_sums(_values(sequence))
