"""Servicers written once for both gRPC servers: handlers, their steps, and the two drivers."""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Iterator

import pytest

from servinglib.protos import health_pb2
from servinglib.server.grpc import health, inference_service, model_service, prediction_service
from servinglib.server.grpc._step import Step, Steps, answer, answer_blocking, blocking
from servinglib.server.management.model_management import ModelManagement
from servinglib.server.plane.data_plane import DataPlane
from servinglib.server.server_core import ServerCore

Response = health_pb2.HealthCheckResponse
SERVING = Response.ServingStatus.SERVING
NOT_SERVING = Response.ServingStatus.NOT_SERVING


async def suspending(status: int) -> int:
    """The async form of a step that really suspends (as a model's own coroutine may)."""
    await asyncio.sleep(0)
    return status


def at_once(status: int) -> int:
    """The blocking form of the same step."""
    return status


def driven(drive: str, outcome: Steps[Response]) -> object:
    """``outcome``'s response, driven as grpc.aio (``"aio"``) or a synchronous server does."""
    return asyncio.run(answer(outcome)) if drive == "aio" else answer_blocking(outcome)


def answering(step: Step[int]) -> Steps[Response]:
    """A handler waiting for one step and answering with its result."""
    status = yield from step
    return Response(status=status)  # type: ignore[arg-type]


def test_the_synchronous_drive_calls_the_blocking_form_where_the_coroutine_would_suspend() -> None:
    """On a thread without an event loop each step's blocking form runs; its coroutine never."""
    step = Step(suspending, at_once, SERVING)
    assert answer_blocking(answering(step)) == Response(status=SERVING)


def test_the_grpc_aio_drive_awaits_each_step_that_suspends() -> None:
    """On grpc.aio each step's coroutine is awaited, also one that suspends, in order."""

    def refused(status: int) -> int:
        raise AssertionError(f"the blocking form ran on the event loop ({status})")

    def two_steps() -> Steps[Response]:
        first = yield from Step(suspending, refused, NOT_SERVING)
        second = yield from Step(suspending, refused, SERVING)
        return Response(status=first * 10 + second)  # type: ignore[arg-type]

    response = asyncio.run(answer(two_steps()))
    assert response == Response(status=NOT_SERVING * 10 + SERVING)  # type: ignore[arg-type]


@pytest.mark.parametrize("drive", ["aio", "sync"])
def test_a_steps_error_is_raised_at_the_handlers_yield(drive: str) -> None:
    """A step that fails raises inside the handler, which may answer all the same."""

    async def failing() -> int:
        raise LookupError("no such thing")

    def failing_blocking() -> int:
        raise LookupError("no such thing")

    def handler() -> Steps[Response]:
        try:
            yield from Step(failing, failing_blocking)
        except LookupError:
            return Response(status=NOT_SERVING)
        return Response(status=SERVING)

    assert driven(drive, handler()) == Response(status=NOT_SERVING)


@pytest.mark.parametrize("drive", ["aio", "sync"])
def test_an_uncaught_step_error_is_the_rpcs_and_closes_the_handler(drive: str) -> None:
    """A step's error the handler does not catch leaves the drive, the handler's cleanup run."""
    cleaned = threading.Event()

    def handler() -> Steps[Response]:
        try:
            yield from blocking(int, "not a number")
        finally:
            cleaned.set()
        return Response(status=SERVING)

    with pytest.raises(ValueError, match="not a number"):
        driven(drive, handler())
    assert cleaned.is_set()


def test_a_blocking_step_leaves_the_event_loop_and_stays_on_a_server_thread() -> None:
    """A blocking action runs on a worker thread under grpc.aio, on the calling thread else."""

    def thread_of() -> int:
        return threading.get_ident()

    def handler() -> Steps[Response]:
        ident = yield from blocking(thread_of)
        return Response(status=SERVING if ident == threading.get_ident() else NOT_SERVING)

    assert asyncio.run(answer(handler())) == Response(status=NOT_SERVING)
    assert answer_blocking(handler()) == Response(status=SERVING)


def test_a_handler_that_waits_for_nothing_is_answered_as_it_returned() -> None:
    """A plain handler's response is the RPC's, on both drives."""
    response = Response(status=SERVING)
    assert answer_blocking(response) is response
    assert asyncio.run(answer(response)) is response


@pytest.fixture
def plane(core: ServerCore) -> Iterator[DataPlane]:
    """A DataPlane over the module's core."""
    plane = DataPlane(core)
    yield plane
    plane.close()


def test_no_servicer_rpc_is_a_coroutine_function(plane: DataPlane) -> None:
    """Every RPC a servicer registers is a plain function or a generator of steps: both
    servers drive it, and none needs to complete without suspending."""
    management = ModelManagement(plane.core)
    servicers = [
        prediction_service.PredictionServicer(plane),
        model_service.ModelServicer(plane, management),
        inference_service.InferenceServicer(plane, management),
        health.HealthServicer(plane.core, ()),
    ]
    rpcs = [rpc for servicer in servicers for rpc in servicer.rpcs()]
    assert len(rpcs) == 19
    for rpc in rpcs:
        assert not inspect.iscoroutinefunction(rpc.handler), rpc.method
