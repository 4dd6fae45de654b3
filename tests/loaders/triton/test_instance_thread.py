"""InstanceThread: the calls of one instance from event loops, one at a time, in arrival order,
on a thread of the instance's own; deadlines, callers that leave, its thread's idle end."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from servinglib.errors import DeadlineExceededError, UnavailableError
from servinglib.loaders.triton import instance_thread
from servinglib.loaders.triton.instance_thread import InstanceThread
from servinglib.servable import (
    CallSite,
    CallStages,
    ModelCall,
    Servable,
    SignatureSpec,
    Tensors,
    TensorSpec,
)
from servinglib.testing import wait_until

SPEC = SignatureSpec([TensorSpec("x", np.float32, [-1])], [TensorSpec("y", np.float32, [-1])])
CALLER = contextvars.ContextVar[str]("caller", default="")


class Recorder(Servable):
    """Answers x back after ``hold`` (an event it waits for when x[0] < 0), recording the
    order of calls, their threads, the caller's context variable, and any overlap."""

    def __init__(self) -> None:
        self.hold = threading.Event()
        self.hold.set()
        self.entered = threading.Event()
        self.order: list[float] = []
        self.threads: set[str] = set()
        self.callers: list[str] = []
        self.running = 0
        self.overlapped = False

    @property
    def signatures(self) -> Mapping[str, SignatureSpec]:
        return {"serving_default": SPEC}

    def call(
        self, signature_name: str, inputs: Tensors, output_filter: frozenset[str] | None = None
    ) -> dict[str, npt.NDArray[Any]]:
        self.running += 1
        self.overlapped |= self.running > 1
        try:
            x = inputs["x"]
            self.order.append(float(x[0]))
            self.threads.add(threading.current_thread().name)
            self.callers.append(CALLER.get())
            if x[0] == 666:
                raise ZeroDivisionError("the model's own")
            if x[0] < 0:
                self.entered.set()
                self.hold.wait(10)
            return {"y": x}
        finally:
            self.running -= 1


class Released:
    """Counts a call's releases."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


def _call(
    servable: Servable, value: float, deadline: float | None = None, rows: int = 1
) -> tuple[ModelCall, Released]:
    released = Released()
    inputs = {"x": np.full(rows, value, np.float32)}
    site = CallSite("model", 1, "serving_default")
    call = ModelCall(site, servable, SPEC, inputs, None, deadline, CallStages(), released)
    return call, released


def test_calls_run_one_at_a_time_in_arrival_order_on_the_instances_thread() -> None:
    servable = Recorder()
    placement = InstanceThread("model_0")

    async def main() -> list[float]:
        async def one(value: float) -> float:
            CALLER.set(f"caller {value:g}")
            call, _ = _call(servable, value)
            return float((await placement.run(call))["y"][0])

        return list(await asyncio.gather(*(one(v) for v in range(20))))

    try:
        assert asyncio.run(main()) == list(range(20))
    finally:
        placement.close()
    assert servable.order == list(range(20))
    assert servable.threads == {"servinglib-instance model_0"}
    assert servable.callers == [f"caller {v}" for v in range(20)]  # each call's own context
    assert not servable.overlapped


@pytest.mark.parametrize("ending", ["its deadline passes", "its caller leaves"])
def test_a_call_that_ends_while_it_waits_is_never_run(ending: str) -> None:
    """Behind a held call, a call whose deadline passes (DEADLINE_EXCEEDED) or whose caller
    leaves is released and never reaches the model."""
    servable = Recorder()
    servable.hold.clear()
    placement = InstanceThread("model_0")

    async def main() -> None:
        blocking, _ = _call(servable, -1.0)
        first = asyncio.ensure_future(placement.run(blocking))
        await asyncio.to_thread(servable.entered.wait, 10)
        if ending == "its deadline passes":
            late, released = _call(servable, 7.0, deadline=time.monotonic() + 0.05)
            with pytest.raises(DeadlineExceededError):
                await placement.run(late)
        else:
            gone, released = _call(servable, 7.0)
            waiting = asyncio.ensure_future(placement.run(gone))
            await asyncio.sleep(0)  # queued
            waiting.cancel()
        servable.hold.set()
        await first
        await asyncio.to_thread(wait_until, lambda: released.count == 1)

    try:
        asyncio.run(main())
    finally:
        placement.close()
    assert servable.order == [-1.0]


def test_the_models_own_exception_reaches_its_caller_and_the_next_call_runs() -> None:
    servable = Recorder()
    placement = InstanceThread("model_0")

    async def main() -> float:
        failing, released = _call(servable, 666.0)
        with pytest.raises(ZeroDivisionError, match="the model's own"):
            await placement.run(failing)
        await asyncio.to_thread(wait_until, lambda: released.count == 1)
        call, _ = _call(servable, 2.0)
        return float((await placement.run(call))["y"][0])

    try:
        assert asyncio.run(main()) == 2.0
    finally:
        placement.close()


def test_the_thread_ends_when_idle_and_starts_again_for_the_next_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(instance_thread, "IDLE_S", 0.05)
    servable = Recorder()
    placement = InstanceThread("model_0")

    def threads() -> int:
        return sum(t.name == "servinglib-instance model_0" for t in threading.enumerate())

    async def one(value: float) -> None:
        call, _ = _call(servable, value)
        await placement.run(call)

    try:
        asyncio.run(one(1.0))
        wait_until(lambda: threads() == 0)
        asyncio.run(one(2.0))
        assert servable.order == [1.0, 2.0]
    finally:
        placement.close()
    assert threads() == 0  # close() joined it


def test_after_close_a_call_is_refused_and_released() -> None:
    placement = InstanceThread("model_0")
    placement.close()
    call, released = _call(Recorder(), 1.0)
    with pytest.raises(UnavailableError, match="model_0 has stopped serving"):
        asyncio.run(placement.run(call))
    assert released.count == 1


@pytest.mark.parametrize("inline", [False, True], ids=["thread", "inline"])
def test_a_request_of_rows_is_a_batch_of_that_many(inline: bool) -> None:
    """With a batch dimension, a request of 3 rows: batch size 3, leading its batch, 3 rows."""
    placement = InstanceThread("model_0", inline=inline, batch_dimension=True)
    call, _ = _call(Recorder(), 1.0, rows=3)
    try:
        asyncio.run(placement.run(call))
    finally:
        placement.close()
    stages = call.stages
    assert (stages.batch_size, stages.rows, stages.leads_batch) == (3, 3, True)


def test_inline_runs_on_the_asking_thread_and_a_blocking_caller_on_its_own() -> None:
    servable = Recorder()
    inline = InstanceThread("model_0", inline=True)
    threaded = InstanceThread("model_1")
    call, released = _call(servable, 1.0)
    asyncio.run(inline.run(call))
    other, other_released = _call(servable, 2.0)
    threaded.run_blocking(other)
    inline.close()
    threaded.close()
    assert servable.threads == {threading.current_thread().name}
    assert (released.count, other_released.count) == (1, 1)
