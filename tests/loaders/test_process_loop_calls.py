"""Model processes called from an event loop (sent and answered on the loop, no thread), and
instance processes that run one call at a time with the next one queued in their socket."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from servinglib.errors import DeadlineExceededError, UnavailableError
from servinglib.loaders.instances import InstancesServable
from servinglib.loaders.process import ProcessServable
from servinglib.loaders.python import PythonPlatformConfig
from servinglib.loaders.warmup import WarmupOptions
from servinglib.servable import deadline_scope
from servinglib.testing import wait_until, write_python_model

PY_FACTORY = "servinglib.loaders.python:PythonLoader"
PY_CONFIG = PythonPlatformConfig(allow_code_execution=True, warmup=WarmupOptions(enabled=False))

MODEL_PY = """
import logging, os, time
import numpy as np
from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec

X = [TensorSpec("x", "float32", [-1])]

class Model(PythonModel):
    def load(self, path):
        self.dir = os.path.dirname(os.path.dirname(path))  # the test's directory

    @signature(name="twice", inputs=X, outputs=[TensorSpec("y", "float32", [-1])])
    def twice(self, x):
        logging.getLogger("test.model").warning("twice %s", x[0])
        return {"y": x * 2}

    @signature(name="big", inputs=X, outputs=[TensorSpec("y", "float32", [-1])])
    def big(self, x):
        return {"y": np.full(1 << 20, x[0], np.float32)}  # 4 MiB: beside the message's pickle

    @signature(name="sleep", inputs=X,
               outputs=[TensorSpec("started", "float64", [1]), TensorSpec("ended", "float64", [1])])
    def sleep(self, x):
        started = time.time()
        open(os.path.join(self.dir, f"sleeping-{os.getpid()}"), "w").close()
        with open(os.path.join(self.dir, "sleeps"), "a") as sleeps:
            sleeps.write(f"{x[0]}\\n")
        time.sleep(float(x[0]))
        return {"started": np.array([started]), "ended": np.array([time.time()])}
"""


def _x(value: float) -> dict[str, np.ndarray]:
    return {"x": np.array([value], np.float32)}


@pytest.fixture
def model(tmp_path: Path) -> Path:
    return write_python_model(tmp_path, "model", MODEL_PY) / "1"


@pytest.fixture
def process(model: Path) -> Iterator[ProcessServable]:
    servable = ProcessServable.start(PY_FACTORY, str(model), PY_CONFIG)
    yield servable
    servable.close()


def test_a_loop_call_is_answered_on_the_loop(
    process: ProcessServable, caplog: pytest.LogCaptureFixture
) -> None:
    """The loop sends the call and reads its answer (and the log line before it) itself."""
    caplog.set_level(logging.INFO)
    assert process.answers_on_loop(_x(3.0))

    async def call() -> np.ndarray:
        return (await process.call_async("twice", _x(3.0)))["y"]

    np.testing.assert_array_equal(asyncio.run(call()), [6.0])
    (record,) = [r for r in caplog.records if r.getMessage().endswith("twice 3.0")]
    assert record.threadName == threading.current_thread().name  # the loop's: no thread read it


def test_a_large_answer_read_on_the_loop_arrives_whole_and_writable(
    process: ProcessServable,
) -> None:
    async def calls() -> list[np.ndarray]:
        answers = await asyncio.gather(*(process.call_async("big", _x(float(i))) for i in range(4)))
        return [a["y"] for a in answers]

    for i, y in enumerate(asyncio.run(calls())):
        assert y.shape == (1 << 20,)
        assert (y == i).all()
        assert y.flags.writeable


def test_large_or_object_inputs_are_not_sent_from_the_loop(process: ProcessServable) -> None:
    assert not process.answers_on_loop({"x": np.zeros(1 << 20, np.float32)})
    assert not process.answers_on_loop({"x": np.array([b"a"], object)})


def test_loop_calls_and_thread_calls_share_one_process(process: ProcessServable) -> None:
    """Calls from a loop and from threads at once each get their own answer, whoever reads."""

    def from_a_thread(value: float) -> float:
        return float(process.call("twice", _x(value))["y"][0])

    async def calls() -> tuple[list[float], list[float]]:
        loop = asyncio.get_running_loop()
        threaded = [loop.run_in_executor(None, from_a_thread, float(i)) for i in range(8)]
        on_loop = [process.call_async("twice", _x(float(100 + i))) for i in range(40)]
        answers = await asyncio.gather(*on_loop)
        return [float(a["y"][0]) for a in answers], list(await asyncio.gather(*threaded))

    on_loop, threaded = asyncio.run(calls())
    assert on_loop == [2.0 * (100 + i) for i in range(40)]
    assert threaded == [2.0 * i for i in range(8)]


def test_a_loop_call_past_its_deadline_gives_up_and_the_process_serves_on(
    process: ProcessServable,
) -> None:
    async def calls() -> None:
        started = time.monotonic()
        with deadline_scope(started + 0.2), pytest.raises(DeadlineExceededError, match="process"):
            await process.call_async("sleep", _x(1.0))
        assert time.monotonic() - started < 0.9
        assert (await process.call_async("twice", _x(1.0)))["y"][0] == 2.0

    asyncio.run(calls())
    assert process.call("twice", _x(2.0))["y"][0] == 4.0  # a thread reads again too


def test_a_loop_that_ends_with_a_call_in_flight_hands_reading_back(
    process: ProcessServable, model: Path
) -> None:
    """A loop closed while its call runs in the process (its task cancelled) leaves the reading
    to the process's reader thread: a thread's call is answered, the late answer dropped."""

    async def leave_a_call_running() -> None:
        running = asyncio.ensure_future(process.call_async("sleep", _x(0.5)))
        while not any(p.name.startswith("sleeping-") for p in model.parent.parent.iterdir()):
            await asyncio.sleep(0.01)
        assert not running.done()  # asyncio.run cancels the call's task as it ends

    asyncio.run(leave_a_call_running())
    assert process.call("twice", _x(5.0))["y"][0] == 10.0


def test_a_process_that_dies_fails_the_loop_call_and_its_successor_answers_on_the_loop(
    process: ProcessServable, model: Path
) -> None:
    async def call_while_killed() -> BaseException | None:
        running = asyncio.ensure_future(process.call_async("sleep", _x(30.0)))
        while not any(p.name.startswith("sleeping-") for p in model.parent.parent.iterdir()):
            await asyncio.sleep(0.01)
        os.kill(process.pid, signal.SIGKILL)
        try:
            await running
        except UnavailableError as error:
            return error
        return None

    dead = process.pid
    error = asyncio.run(call_while_killed())
    assert isinstance(error, UnavailableError)
    assert str(dead) in error.message
    wait_until(lambda: process.serving, timeout_s=60)

    async def call() -> float:
        return float((await process.call_async("twice", _x(4.0)))["y"][0])

    assert asyncio.run(call()) == 8.0


def test_closing_while_a_loop_reads_returns_once_the_running_call_ends(
    process: ProcessServable, model: Path
) -> None:
    """Close takes the reading back from the loop: the process ends its call (answered) and
    exits, and close returns (it would wait forever for a reader the loop held)."""
    outcome: list[object] = []

    async def call() -> None:
        try:
            outcome.append((await process.call_async("sleep", _x(1.0)))["ended"])
        except Exception as error:  # noqa: BLE001 - the test looks at it
            outcome.append(error)

    loop_thread = threading.Thread(target=asyncio.run, args=(call(),))
    loop_thread.start()
    wait_until(lambda: any(p.name.startswith("sleeping-") for p in model.parent.parent.iterdir()))
    started = time.monotonic()
    process.close()
    assert time.monotonic() - started < 20  # (the process waits for its call: 1 s)
    loop_thread.join(30)
    assert len(outcome) == 1


def test_a_process_started_one_call_at_a_time_runs_calls_in_order_not_together(
    model: Path,
) -> None:
    """Calls sent while one runs wait in the process's socket and run after it, in order."""
    servable = ProcessServable.start(PY_FACTORY, str(model), PY_CONFIG, one_call_at_a_time=True)
    try:
        assert servable.queues_calls

        async def three() -> list[tuple[float, float]]:
            calls = [servable.call_async("sleep", _x(0.2)) for _ in range(3)]
            answers = await asyncio.gather(*calls)
            return [(float(a["started"][0]), float(a["ended"][0])) for a in answers]

        spans = asyncio.run(three())
        for (_, ended), (started, _) in itertools.pairwise(spans):
            assert started >= ended  # each started once the one before it had ended
    finally:
        servable.close()


def test_a_call_whose_deadline_passes_while_queued_in_the_process_does_not_run(
    model: Path,
) -> None:
    servable = ProcessServable.start(PY_FACTORY, str(model), PY_CONFIG, one_call_at_a_time=True)
    try:

        async def calls() -> None:
            long = asyncio.ensure_future(servable.call_async("sleep", _x(0.5)))
            while not any(p.name.startswith("sleeping-") for p in model.parent.parent.iterdir()):
                await asyncio.sleep(0.01)  # until the process runs it: the next call queues
            with deadline_scope(time.monotonic() + 0.2), pytest.raises(DeadlineExceededError):
                await servable.call_async("sleep", _x(0.0))
            await long

        asyncio.run(calls())
        # the queued call's deadline had passed when the process read it: it never ran
        sleeps = model.parent.parent / "sleeps"
        assert sleeps.read_text().split() == ["0.5"]
        servable.call("sleep", _x(0.0))
        assert sleeps.read_text().split() == ["0.5", "0.0"]
    finally:
        servable.close()


class _Queueing:
    """An instance as :class:`_FreeInstances` sees it: one that queues calls, serving or not."""

    queues_calls = True

    def __init__(self, serving: bool = True) -> None:
        self.serving = serving
        self.signatures: dict[str, object] = {}


def test_instances_that_queue_calls_take_two_each_idle_ones_first() -> None:
    free = InstancesServable([_Queueing(), _Queueing()])._free  # type: ignore[list-item]
    taken = [free.acquire(None) for _ in range(4)]
    assert sorted(taken[:2]) == [0, 1]  # an idle instance before a busy one
    assert sorted(taken[2:]) == [0, 1]
    with pytest.raises(DeadlineExceededError):
        free.acquire(time.monotonic() + 0.05)  # two each: the fifth waits
    free.release(1)
    assert free.acquire(None) == 1


def test_an_instance_that_serves_is_taken_before_an_idle_one_that_does_not() -> None:
    free = InstancesServable([_Queueing(serving=False), _Queueing()])._free  # type: ignore[list-item]
    assert [free.acquire(None) for _ in range(3)] == [1, 1, 0]


def test_a_loop_waiter_gets_the_freed_place_and_one_that_gave_up_passes_it_on() -> None:
    free = InstancesServable([_Queueing()])._free  # type: ignore[list-item]

    async def waits() -> list[int]:
        assert [free.acquire(None) for _ in range(2)] == [0, 0]
        with pytest.raises(DeadlineExceededError):
            await free.acquire_async(time.monotonic() + 0.05)
        first = asyncio.ensure_future(free.acquire_async(None))
        second = asyncio.ensure_future(free.acquire_async(None))
        await asyncio.sleep(0)
        first.cancel()
        free.release(0)  # from this thread: given to the first, which gave up, then on
        await asyncio.sleep(0)
        threading.Thread(target=free.release, args=(0,)).start()  # from another thread
        return [await second, await asyncio.wait_for(free.acquire_async(None), 5)]

    assert asyncio.run(waits()) == [0, 0]


def test_a_place_given_to_a_waiter_whose_loop_has_closed_goes_to_the_next() -> None:
    """A loop closed with its waiter still queued (no cancellation ran) cannot take the place:
    the next waiter, a thread here, gets it."""
    free = InstancesServable([_Queueing()])._free  # type: ignore[list-item]
    assert [free.acquire(None) for _ in range(2)] == [0, 0]
    loop = asyncio.new_event_loop()
    waiting = loop.create_task(free.acquire_async(None))
    loop.run_until_complete(asyncio.sleep(0))  # the task waits in the queue now
    loop.close()
    got: list[int] = []
    thread = threading.Thread(target=lambda: got.append(free.acquire(None)))
    thread.start()
    wait_until(lambda: len(free._waiting) == 2)
    free.release(0)  # (from this thread, not the closed loop's own)
    thread.join(5)
    assert got == [0]
    assert not waiting.done()  # never woken: its loop is gone


def test_large_inputs_given_to_call_async_go_from_a_thread(process: ProcessServable) -> None:
    x = {"x": np.arange(1 << 20, dtype=np.float32)}

    async def call() -> np.ndarray:
        return (await process.call_async("twice", x))["y"]

    np.testing.assert_array_equal(asyncio.run(call()), x["x"] * 2)
