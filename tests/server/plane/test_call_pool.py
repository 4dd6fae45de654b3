"""CallPool: each model holds at most its share of the workers; overdue calls are counted."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from servinglib.errors import CancelledError, DeadlineExceededError, UnavailableError
from servinglib.servable import CallSite
from servinglib.server.plane.call_pool import CallPool, default_max_calls_per_model
from servinglib.testing import wait_until

HANG = CallSite("hang", 1, "serving_default")
OTHER = CallSite("other", 1, "serving_default")


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()  # lets the calls still blocked end, so the pool's threads can stop


@pytest.fixture
def pool(gate: threading.Event) -> Iterator[CallPool]:
    pool = CallPool(4, 2, "test-call")
    yield pool
    gate.set()
    pool.close()


def blocked(gate: threading.Event, started: list[int]) -> dict[str, Any]:
    started.append(1)
    gate.wait(60)
    return {"done": True}


def test_default_share_is_half_the_pool() -> None:
    """By default one model gets half the workers, and at least one."""
    assert default_max_calls_per_model(8) == 4
    assert default_max_calls_per_model(1) == 1


def test_a_model_past_its_share_waits_while_others_run(
    pool: CallPool, gate: threading.Event
) -> None:
    """Four hanging calls of one model occupy two workers; another model's call still runs."""
    started: list[int] = []

    async def run() -> None:
        hanging = [pool.submit(HANG, None, lambda: None, blocked, gate, started) for _ in range(4)]
        assert await pool.submit(OTHER, None, lambda: None, lambda: {"done": 1}) == {"done": 1}
        assert len(started) == 2  # the other two wait for their model's own calls
        gate.set()
        assert all(r == {"done": True} for r in await asyncio.gather(*hanging))
        assert len(started) == 4

    asyncio.run(run())


def test_a_waiting_call_that_is_cancelled_lets_go_at_once(
    pool: CallPool, gate: threading.Event
) -> None:
    """A call waiting for its model's share whose request goes away runs on_done without waiting."""
    started: list[int] = []
    released = threading.Event()

    async def run() -> None:
        for _ in range(2):
            pool.submit(HANG, None, lambda: None, blocked, gate, started)
        waiting = pool.submit(HANG, None, released.set, blocked, gate, started)
        waiting.cancel()
        await asyncio.sleep(0)  # the done callbacks run
        assert released.is_set()
        gate.set()

    asyncio.run(run())
    wait_until(lambda: len(started) == 2 and not pool.running(), timeout_s=10)
    assert len(started) == 2  # the cancelled call never ran


def test_a_call_past_its_deadline_counts_as_overdue_until_it_returns(
    pool: CallPool, gate: threading.Event
) -> None:
    """A running call fails at its deadline, is overdue while it runs on, and not after."""
    started: list[int] = []

    async def run() -> None:
        future = pool.submit(HANG, time.monotonic() + 0.05, lambda: None, blocked, gate, started)
        with pytest.raises(DeadlineExceededError):
            await future
        assert pool.overdue() == {("hang", 1): 1}
        assert [c.overdue for c in pool.running()] == [True]

    asyncio.run(run())
    gate.set()
    wait_until(lambda: not pool.overdue(), timeout_s=10)


def test_a_call_waiting_at_its_deadline_never_runs(pool: CallPool, gate: threading.Event) -> None:
    """A call still waiting for its model's share at its deadline fails and is dropped."""
    started: list[int] = []
    released = threading.Event()

    async def run() -> None:
        for _ in range(2):
            pool.submit(HANG, None, lambda: None, blocked, gate, started)
        late = pool.submit(HANG, time.monotonic() + 0.05, released.set, blocked, gate, started)
        with pytest.raises(DeadlineExceededError):
            await late
        assert released.is_set()
        assert pool.overdue() == {}
        gate.set()

    asyncio.run(run())
    wait_until(lambda: not pool.running(), timeout_s=10)
    assert len(started) == 2


def test_cut_off_answers_every_pending_call(pool: CallPool, gate: threading.Event) -> None:
    """At shutdown every call not finished fails with the given error; the running are named."""
    started: list[int] = []

    async def run() -> None:
        futures = [pool.submit(HANG, None, lambda: None, blocked, gate, started) for _ in range(3)]
        await asyncio.to_thread(wait_until, lambda: len(started) == 2, 10)
        running = pool.cut_off(UnavailableError("shutting down"))
        assert [call.site for call in running] == [HANG, HANG]
        for future in futures:
            with pytest.raises(UnavailableError):
                await future

    asyncio.run(run())


def test_calls_run_here_share_the_model_places_with_the_pool(
    pool: CallPool, gate: threading.Event
) -> None:
    """A server thread's call takes a place of its model's share: past it, it waits (until its
    deadline) behind the pool's calls, and gets the place a finished call gives back."""
    started: list[int] = []
    admitted = threading.Event()

    def waiting_thread() -> None:
        pool.enter_here(HANG.model_name, None)  # no deadline: waits for a place
        admitted.set()
        pool.leave_here(HANG.model_name)

    async def run() -> None:
        hanging = [pool.submit(HANG, None, lambda: None, blocked, gate, started) for _ in range(2)]
        await asyncio.to_thread(wait_until, lambda: len(started) == 2, 30)
        with pytest.raises(DeadlineExceededError):
            await asyncio.to_thread(pool.enter_here, HANG.model_name, time.monotonic() + 0.05)
        await asyncio.to_thread(pool.enter_here, OTHER.model_name, None)  # another model: at once
        pool.leave_here(OTHER.model_name)
        waiter = threading.Thread(target=waiting_thread)
        waiter.start()
        gate.set()
        assert await asyncio.gather(*hanging) == [{"done": True}] * 2
        await asyncio.to_thread(waiter.join, 30)
        assert admitted.is_set()

    asyncio.run(run())
    pool.enter_here(HANG.model_name, None)  # every place was given back
    pool.enter_here(HANG.model_name, None)
    pool.leave_here(HANG.model_name)
    pool.leave_here(HANG.model_name)


def test_a_call_waiting_here_leaves_the_queue_when_its_client_goes(
    pool: CallPool, gate: threading.Event
) -> None:
    """A server thread waiting for a place asks ``client_active`` as it waits: once the client
    has gone it fails with CANCELLED and leaves the queue, so the next call takes the place."""
    started: list[int] = []
    gone = threading.Event()

    async def run() -> None:
        hanging = [pool.submit(HANG, None, lambda: None, blocked, gate, started) for _ in range(2)]
        await asyncio.to_thread(wait_until, lambda: len(started) == 2, 30)
        waiting = asyncio.ensure_future(
            asyncio.to_thread(
                pool.enter_here, HANG.model_name, None, client_active=lambda: not gone.is_set()
            )
        )
        await asyncio.sleep(0.2)
        assert not waiting.done()  # the client is still there: it waits
        began = time.monotonic()
        gone.set()
        with pytest.raises(CancelledError, match="client"):
            await waiting
        assert time.monotonic() - began < 1.0
        gate.set()
        assert await asyncio.gather(*hanging) == [{"done": True}] * 2

    asyncio.run(run())
    pool.enter_here(HANG.model_name, None)  # the cancelled waiter took no place
    pool.enter_here(HANG.model_name, None)
    pool.leave_here(HANG.model_name)
    pool.leave_here(HANG.model_name)


SECOND = CallSite("second", 1, "serving_default")
THIRD = CallSite("third", 1, "serving_default")


async def hang_past_deadline(
    pool: CallPool, site: CallSite, calls: int, gate: threading.Event, started: list[int]
) -> None:
    """``calls`` calls of ``site`` that block on ``gate`` and fail at a deadline just ahead."""
    futures = [
        pool.submit(site, time.monotonic() + 0.05, lambda: None, blocked, gate, started)
        for _ in range(calls)
    ]
    for future in futures:
        with pytest.raises(DeadlineExceededError):
            await future


def test_two_hung_models_leave_workers_to_the_others(pool: CallPool, gate: threading.Event) -> None:
    """Two models whose calls hang past their deadline hold all four workers; a third model's
    call still runs: calls past their deadline are written off and replaced by new threads."""
    started: list[int] = []

    async def run() -> None:
        await hang_past_deadline(pool, HANG, 2, gate, started)
        await hang_past_deadline(pool, SECOND, 2, gate, started)
        assert sum(pool.overdue().values()) == 4
        answer = pool.submit(THIRD, time.monotonic() + 30, lambda: None, lambda: {"done": 1})
        assert await answer == {"done": 1}
        assert not pool.starved()

    asyncio.run(run())


def test_a_pool_whose_every_thread_hangs_is_starved(pool: CallPool, gate: threading.Event) -> None:
    """Replacement threads stop at twice the pool: with all eight held by calls past their
    deadline the pool says it is starved (readiness turns 503), and not once one returns."""
    started: list[int] = []
    sites = [CallSite(f"m{i}", 1, "serving_default") for i in range(4)]

    async def run() -> None:
        for site in sites:
            await hang_past_deadline(pool, site, 2, gate, started)
        assert sum(pool.overdue().values()) == 8
        assert pool.starved()
        assert len(started) == 8

    asyncio.run(run())
    gate.set()
    wait_until(lambda: not pool.starved() and not pool.overdue(), timeout_s=10)


def test_a_draining_pool_lets_one_model_use_every_worker(
    pool: CallPool, gate: threading.Event
) -> None:
    """Once draining, a model's calls waiting for its share run on the whole pool (a drain of
    one model's calls finishes in the time of the pool, not of half of it)."""
    started: list[int] = []

    async def run() -> None:
        calls = [pool.submit(HANG, None, lambda: None, blocked, gate, started) for _ in range(4)]
        await asyncio.to_thread(wait_until, lambda: len(started) == 2, 10)
        pool.drain()
        await asyncio.to_thread(wait_until, lambda: len(started) == 4, 10)
        gate.set()
        assert all(r == {"done": True} for r in await asyncio.gather(*calls))

    asyncio.run(run())
