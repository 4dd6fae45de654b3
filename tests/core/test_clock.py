"""Tests for servinglib.core.clock.SystemClock: real monotonic time and timer threads."""

from __future__ import annotations

import threading
import time

import pytest

from servinglib.core.clock import Clock, SystemClock, Timer

TIMEOUT_S = 10.0
# Timer threads wait with the monotonic clock; allow for rounding of the wait's deadline.
TOLERANCE_S = 0.002


class Fired:
    """A callback that records when and on which thread it ran, and sets an event."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self.event = threading.Event()
        self.thread: threading.Thread | None = None
        self.at_s: float | None = None

    def __call__(self) -> None:
        self.thread = threading.current_thread()
        self.at_s = self._clock.now()
        self.event.set()


def test_is_a_clock() -> None:
    """SystemClock implements the Clock interface."""
    assert isinstance(SystemClock(), Clock)


def test_now_is_monotonic_time() -> None:
    """now() reads the monotonic clock: never decreasing, and between two time.monotonic() reads."""
    clock = SystemClock()
    before = time.monotonic()
    readings = [clock.now() for _ in range(1000)]
    after = time.monotonic()

    assert readings == sorted(readings)
    assert before <= readings[0]
    assert readings[-1] <= after


def test_call_later_runs_callback_on_another_thread_after_delay() -> None:
    """The callback runs once its delay has passed, on a daemon thread other than the caller's."""
    clock = SystemClock()
    fired = Fired(clock)
    delay_s = 0.01

    scheduled_at_s = clock.now()
    timer = clock.call_later(delay_s, fired)

    assert isinstance(timer, Timer)
    assert fired.event.wait(TIMEOUT_S)
    assert fired.thread is not None
    assert fired.thread is not threading.current_thread()
    assert fired.thread.daemon
    assert fired.at_s is not None
    assert fired.at_s - scheduled_at_s >= delay_s - TOLERANCE_S


@pytest.mark.parametrize("delay_s", [0.0, -1.0])
def test_non_positive_delay_runs_promptly(delay_s: float) -> None:
    """A zero or negative delay runs the callback as soon as its thread gets to it."""
    fired = Fired(SystemClock())

    SystemClock().call_later(delay_s, fired)

    assert fired.event.wait(TIMEOUT_S)


def test_cancel_before_due_prevents_callback() -> None:
    """A timer cancelled before its due time never runs its callback.

    Timer threads run in no guaranteed order, so the witness is due well after the
    cancelled timer: once it has fired, a cancel that failed would almost surely
    have shown.  And if this thread stalled so long that the cancel came after the
    due time, the premise does not hold and the test cannot judge.
    """
    clock = SystemClock()
    cancelled_delay_s = 0.05
    cancelled = threading.Event()
    witness = Fired(clock)

    scheduled_at_s = clock.now()
    timer = clock.call_later(cancelled_delay_s, cancelled.set)
    timer.cancel()
    cancelled_at_s = clock.now()
    if cancelled_at_s - scheduled_at_s >= cancelled_delay_s:
        pytest.skip("the test thread stalled past the due time before it could cancel")
    clock.call_later(cancelled_delay_s + 0.05, witness)

    assert witness.event.wait(TIMEOUT_S)
    assert not cancelled.is_set()


def test_cancel_is_idempotent_and_harmless_after_firing() -> None:
    """cancel() may be called several times, and after the callback ran, without error."""
    clock = SystemClock()
    fired = Fired(clock)
    timer = clock.call_later(0.0, fired)
    assert fired.event.wait(TIMEOUT_S)

    timer.cancel()
    timer.cancel()

    pending = clock.call_later(TIMEOUT_S, fired)
    pending.cancel()
    pending.cancel()


def test_cancelling_one_timer_leaves_others_running() -> None:
    """Cancelling one timer does not stop another one from running."""
    clock = SystemClock()
    kept = Fired(clock)
    dropped = threading.Event()

    clock.call_later(TIMEOUT_S, dropped.set).cancel()
    clock.call_later(0.0, kept)

    assert kept.event.wait(TIMEOUT_S)
    assert not dropped.is_set()
