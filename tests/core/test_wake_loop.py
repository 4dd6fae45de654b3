"""WakeLoop: a step per wake (wakes during a step run it again), errors logged, a clean stop."""

from __future__ import annotations

import logging
import threading

import pytest

from servinglib.core.wake_loop import WakeLoop

TIMEOUT_S = 10.0


def test_it_waits_for_a_wake_and_a_wake_during_a_step_runs_it_again() -> None:
    """No step before a wake; a wake that arrives while a step runs gives one more step."""
    steps: list[int] = []
    entered, release = threading.Event(), threading.Event()
    done = threading.Semaphore(0)

    def step() -> None:
        steps.append(len(steps))
        if len(steps) == 1:
            entered.set()
            assert release.wait(TIMEOUT_S)
        done.release()

    loop = WakeLoop("test-wake-loop", step, what="test step")
    loop.start()
    try:
        assert not entered.wait(0.05)  # nothing runs until woken
        loop.wake()
        assert entered.wait(TIMEOUT_S)
        loop.wake()  # during the first step
        loop.wake()  # and again: still one more step
        release.set()
        assert done.acquire(timeout=TIMEOUT_S)
        assert done.acquire(timeout=TIMEOUT_S)
    finally:
        loop.stop()
    assert steps == [0, 1]
    assert not loop.running


def test_a_failing_step_is_logged_and_the_loop_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    """A step that raises is logged with the loop's name, and the next wake runs it again."""
    calls = threading.Semaphore(0)
    count = 0

    def step() -> None:
        nonlocal count
        count += 1
        calls.release()
        if count == 1:
            raise RuntimeError("broken once")

    loop = WakeLoop("test-wake-loop", step, what="the test step", first_wait_s=0.0)
    with caplog.at_level(logging.ERROR, logger="servinglib.core.wake_loop"):
        loop.start()
        assert calls.acquire(timeout=TIMEOUT_S)  # first_wait_s=0: runs at once
        loop.wake()
        assert calls.acquire(timeout=TIMEOUT_S)
        loop.stop()
    assert "the test step failed; going on" in caplog.text
    assert count == 2


def test_a_step_returning_zero_runs_again_at_once_and_stop_from_a_step_returns() -> None:
    """step() -> 0 runs again without a wake; stop() called inside a step does not deadlock."""
    count = 0
    stopped = threading.Event()

    def step() -> float:
        nonlocal count
        count += 1
        if count == 3:
            loop.stop()
            stopped.set()
        return 0.0

    loop = WakeLoop("test-wake-loop", step, what="test step", first_wait_s=0.0)
    loop.start()
    assert stopped.wait(TIMEOUT_S)
    loop.stop()
    assert count == 3
