"""Triton's dynamic batching of a Python model: execute() gets the queued requests as a list."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from servinglib.batching import BatchingParameters, BatchingServable
from servinglib.core.servable_id import ServableId
from servinglib.errors import ServingError, StatusCode
from servinglib.loaders import PythonPlatformConfig
from servinglib.loaders.model_batching import ModelBatching
from servinglib.loaders.python import PythonLoader
from servinglib.loaders.triton.config import parse_model_config
from servinglib.loaders.triton.python_config import not_implemented
from servinglib.loaders.triton.request_batching import RequestBatching
from servinglib.servable import CallSite, CallStages, ModelCall
from servinglib.server import ModelServerConfig, ModelSpec, ServerCore, ServerCoreOptions
from servinglib.server.triton_repository import TritonRepository
from servinglib.testing import wait_until
from tests.triton.python_models import write_batch_recorder

Outputs = dict[str, np.ndarray]


def _seen(outputs: Outputs) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(outputs["SEEN"][0][0])
    return value


def test_queued_requests_reach_execute_as_one_list(serve: Any) -> None:
    """Requests queued while execute() runs reach the next execute() as one list, rows counted."""
    client = serve("max_queue_delay_microseconds: 0")
    first = client.hold()
    waiting = [client.send([1, 2]), client.send([3]), client.send([4, 5, 6])]
    client.wait_queued(3)
    client.model.gate.set()

    answers = [future.result(10) for future in waiting]

    assert first.result(10)["Y"].tolist() == [[0]]
    assert client.model.batches == [(1, 1), (3, 6)]
    assert [a["Y"].ravel().tolist() for a in answers] == [[2, 4], [6], [8, 10, 12]]
    assert {(s["requests"], s["rows"]) for s in map(_seen, answers)} == {(3, 6)}
    assert [s.batch_size for s in client.stages] == [1, 6, 6, 6]
    assert [s.leads_batch for s in client.stages] == [True, True, False, False]
    assert client.released == 4


def test_a_batch_holds_at_most_max_batch_size_rows(serve: Any) -> None:
    """Requests beyond max_batch_size rows wait for the next execute()."""
    client = serve("max_queue_delay_microseconds: 0")
    first = client.hold()
    waiting = [client.send([1] * 5), client.send([1] * 4), client.send([1] * 3)]
    client.wait_queued(3)
    client.model.gate.set()

    for future in [first, *waiting]:
        future.result(10)
    assert client.model.batches == [(1, 1), (1, 5), (2, 7)]


def test_each_request_of_a_batch_gets_its_own_answer(serve: Any) -> None:
    """Requests of one batch see their own parameters and requested outputs, and get them."""
    client = serve("max_queue_delay_microseconds: 0")
    first = client.hold()
    only_y = client.send([1], outputs=["Y"], parameters={"who": "a"})
    both = client.send([2], outputs=["SEEN", "Y"], parameters={"who": "b"})
    client.wait_queued(2)
    client.model.gate.set()
    first.result(10)

    assert only_y.result(10).keys() == {"Y"}
    seen = _seen(both.result(10))
    assert seen["parameters"] == {"who": "b"}
    assert seen["outputs"] == ["SEEN", "Y"]
    assert seen["requests"] == 2


def test_an_error_response_fails_its_request_only(serve: Any) -> None:
    """A TritonError answering one request of a batch fails that request; the others answer."""
    client = serve("max_queue_delay_microseconds: 0")
    first = client.hold()
    good, bad = client.send([1]), client.send([-1])
    client.wait_queued(2)
    client.model.gate.set()
    first.result(10)

    assert good.result(10)["Y"].tolist() == [[2]]
    with pytest.raises(ServingError, match="negative input") as caught:
        bad.result(10)
    assert caught.value.code is StatusCode.INTERNAL
    assert client.model.batches[-1] == (2, 2)


def test_a_full_queue_refuses_with_unavailable(serve: Any) -> None:
    """Beyond default_queue_policy.max_queue_size waiting requests, a request is UNAVAILABLE."""
    client = serve("max_queue_delay_microseconds: 0 default_queue_policy { max_queue_size: 2 }")
    first = client.hold()
    waiting = [client.send([1]), client.send([2])]
    client.wait_queued(2)

    with pytest.raises(ServingError, match="Exceeds maximum queue size") as caught:
        client.send([3]).result(10)
    client.model.gate.set()

    assert caught.value.code is StatusCode.UNAVAILABLE
    assert [f.result(10)["Y"].tolist() for f in [first, *waiting]] == [[[0]], [[2]], [[4]]]
    assert client.released == 4


def test_a_deadline_passing_in_the_queue_fails_the_request_unrun(serve: Any) -> None:
    """A request whose deadline passes while it waits fails DEADLINE_EXCEEDED; execute never
    sees it."""
    client = serve("max_queue_delay_microseconds: 0")
    first = client.hold()
    late = client.send([1], deadline_s=0.05)
    with pytest.raises(ServingError) as caught:
        late.result(10)
    client.model.gate.set()
    first.result(10)

    assert caught.value.code is StatusCode.DEADLINE_EXCEEDED
    wait_until(lambda: client.released == 2)
    assert client.model.batches == [(1, 1)]


def test_a_preferred_size_runs_before_the_queue_delay(serve: Any) -> None:
    """Requests adding up to a preferred batch size run at once, not after the delay."""
    client = serve("max_queue_delay_microseconds: 60000000 preferred_batch_size: [ 3 ]")
    answers = [client.send([1]), client.send([2, 3])]

    assert [a.result(10)["Y"].ravel().tolist() for a in answers] == [[2], [4, 6]]
    assert client.model.batches == [(2, 3)]


def test_the_server_batching_leaves_a_self_batching_model_alone(tmp_path: Path) -> None:
    """The server's merging batching does not wrap a model that batches its requests itself."""
    directory = write_batch_recorder(tmp_path, "max_queue_delay_microseconds: 0")
    batching = ModelBatching(BatchingParameters(num_batch_threads=1))
    loader = batching.wrap_loader(
        ServableId("batch_recorder", 1),
        PythonLoader(str(directory / "1"), PythonPlatformConfig(allow_code_execution=True)),
    )
    loader.load()
    try:
        servable = loader.servable()
        assert servable.batches_itself("serving_default")
        assert isinstance(servable.placement("serving_default"), RequestBatching)
        assert not isinstance(servable, BatchingServable)
    finally:
        loader.unload()
        batching.close()


def test_a_server_without_batching_serves_a_python_model_s_dynamic_batching(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """With the server's batching off, a Python model still batches itself, with no warning
    that its dynamic_batching has no effect."""
    write_batch_recorder(tmp_path, "max_queue_delay_microseconds: 0")
    model = TritonRepository(tmp_path).model("batch_recorder")
    python = PythonPlatformConfig(allow_code_execution=True)

    with (
        caplog.at_level(logging.WARNING, logger="servinglib.server"),
        ServerCore(
            ModelServerConfig([model]), ServerCoreOptions(platform_configs={"python": python})
        ) as core,
        core.servable_handle(ModelSpec.latest("batch_recorder")) as handle,
    ):
        placement = handle.servable.placement("serving_default")

    assert isinstance(placement, RequestBatching)
    assert not [r for r in caplog.records if "has no effect" in r.getMessage()]


def test_a_decoupled_model_s_dynamic_batching_is_named_as_not_applied() -> None:
    """A decoupled model runs each request alone, so its dynamic_batching is named unapplied."""
    text = (
        'backend: "python"\nmax_batch_size: 8\ndynamic_batching { }\n'
        "model_transaction_policy { decoupled: true }\n"
    )
    batched = 'backend: "python"\nmax_batch_size: 8\ndynamic_batching { }\n'

    assert not_implemented(parse_model_config(text, "m")) == ["dynamic_batching"]
    assert not_implemented(parse_model_config(batched, "m")) == []


def test_calls_awaited_on_an_event_loop_reach_execute_as_one_list(serve: Any) -> None:
    """Calls awaited on an event loop (the async front ends') are batched as threads' are."""
    client = serve("max_queue_delay_microseconds: 60000000 preferred_batch_size: [ 3 ]")
    spec = client.servable.signatures["serving_default"]

    async def call(x: int) -> Outputs:
        model_call = ModelCall(
            CallSite("batch_recorder", 1, "serving_default"),
            client.servable,
            spec,
            {"X": np.array([[x]], dtype=np.int32)},
            None,
            None,
            CallStages(),
            lambda: None,
        )
        return await client.placement.run(model_call)

    async def main() -> list[Outputs]:
        return await asyncio.gather(call(1), call(2), call(3))

    answers = asyncio.run(main())

    assert [a["Y"].tolist() for a in answers] == [[[2]], [[4]], [[6]]]
    assert client.model.batches == [(3, 3)]


def test_a_batch_answers_the_calls_of_one_event_loop_with_one_hand_over(serve: Any) -> None:
    """A batch's answers to calls awaited on one loop reach it in one hand-over from the
    batch's thread, not one wake-up of the loop per call."""
    client = serve("max_queue_delay_microseconds: 60000000 preferred_batch_size: [ 3 ]")
    loop = asyncio.new_event_loop()
    hand_overs: list[object] = []
    plain = loop.call_soon_threadsafe

    def counted(callback: Any, *args: Any, **kwargs: Any) -> Any:
        if threading.current_thread() is not threading.main_thread():
            hand_overs.append(callback)
        return plain(callback, *args, **kwargs)

    async def main() -> list[Outputs]:
        return await asyncio.gather(client.call(1), client.call(2), client.call(3))

    loop.call_soon_threadsafe = counted  # type: ignore[method-assign]
    try:
        answers = loop.run_until_complete(main())
    finally:
        loop.close()

    assert [a["Y"].tolist() for a in answers] == [[[2]], [[4]], [[6]]]
    assert len(hand_overs) == 1
    wait_until(lambda: client.released == 3)


def test_an_awaited_call_whose_deadline_passes_in_the_queue_fails_unrun(serve: Any) -> None:
    """An awaited call whose deadline passes while it waits fails DEADLINE_EXCEEDED at its
    deadline; execute never sees it, and it is released once."""
    client = serve("max_queue_delay_microseconds: 0")
    first = client.hold()
    with pytest.raises(ServingError) as caught:
        asyncio.run(client.call(1, deadline_s=0.05))
    client.model.gate.set()
    first.result(10)

    assert caught.value.code is StatusCode.DEADLINE_EXCEEDED
    wait_until(lambda: client.released == 2)
    assert client.model.batches == [(1, 1)]


def test_an_awaited_call_whose_deadline_passes_in_execute_fails_and_is_released(
    serve: Any,
) -> None:
    """A deadline passing while the call's batch runs fails the call at its deadline; the
    answer that comes later is dropped and the call released once, when the batch ends."""
    client = serve("max_queue_delay_microseconds: 0")
    client.model.gate.clear()

    async def late() -> None:
        await client.call(1, deadline_s=0.2)

    with pytest.raises(ServingError) as caught:
        asyncio.run(late())
    assert client.model.entered.is_set()
    assert client.released == 0
    client.model.gate.set()

    assert caught.value.code is StatusCode.DEADLINE_EXCEEDED
    wait_until(lambda: client.released == 1)
    assert client.send([5]).result(10)["Y"].tolist() == [[10]]


def test_an_awaited_call_left_in_the_queue_is_not_run(serve: Any) -> None:
    """A caller that stops waiting (its task cancelled: the client left) leaves its request
    out of the next batch; it is released once."""
    client = serve("max_queue_delay_microseconds: 0")
    first = client.hold()

    async def leave() -> None:
        waiting = asyncio.ensure_future(client.call(1))
        await asyncio.sleep(0)  # it is queued once it has run to its first wait
        client.wait_queued(1)
        waiting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiting

    asyncio.run(leave())
    client.model.gate.set()
    first.result(10)

    wait_until(lambda: client.released == 2)
    assert client.model.batches == [(1, 1)]


def test_an_answer_for_a_closed_event_loop_leaves_the_batch_thread_serving(serve: Any) -> None:
    """A batch whose caller's loop has closed meanwhile drops that answer; the batch's
    thread goes on serving."""
    client = serve("max_queue_delay_microseconds: 0")
    client.model.gate.clear()

    async def leave_in_execute() -> None:
        waiting = asyncio.ensure_future(client.call(1))
        assert await asyncio.to_thread(client.model.entered.wait, 10)
        waiting.cancel()

    asyncio.run(leave_in_execute())  # the loop is closed when this returns
    client.model.gate.set()

    assert client.send([4]).result(10)["Y"].tolist() == [[8]]
    wait_until(lambda: client.released == 2)
