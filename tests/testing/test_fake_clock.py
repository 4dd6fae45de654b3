"""Tests for servinglib.testing.FakeClock: time that moves only when a test advances it."""

from __future__ import annotations

import threading
from collections.abc import Callable

from servinglib.core.clock import Clock
from servinglib.testing import FakeClock

TIMEOUT_S = 10.0


class Recorder:
    """Makes callbacks that log their name and the clock's time when they run."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.fired: list[tuple[str, float]] = []

    def callback(self, name: str) -> Callable[[], None]:
        def record() -> None:
            self.fired.append((name, self.clock.now()))

        return record

    @property
    def names(self) -> list[str]:
        return [name for name, _ in self.fired]


def test_is_a_clock() -> None:
    """FakeClock implements the Clock interface, so it can be injected anywhere a Clock is."""
    assert isinstance(FakeClock(), Clock)


def test_now_starts_at_start_and_stands_still() -> None:
    """now() is the start time (0 by default) and does not move on its own."""
    assert FakeClock().now() == 0.0
    clock = FakeClock(start_s=100.0)

    assert clock.now() == 100.0
    assert clock.now() == 100.0


def test_advance_moves_now_forward() -> None:
    """advance(s) moves now() forward by exactly s, cumulatively."""
    clock = FakeClock(start_s=10.0)

    clock.advance(2.5)
    assert clock.now() == 12.5
    clock.advance(0.5)
    assert clock.now() == 13.0


def test_callbacks_do_not_fire_before_due() -> None:
    """A callback does not run at scheduling, nor on an advance that stops short of its time."""
    clock = FakeClock()
    recorder = Recorder(clock)
    clock.call_later(1.0, recorder.callback("a"))

    assert recorder.fired == []
    clock.advance(0.999)
    assert recorder.fired == []


def test_callbacks_fire_in_time_order_at_their_due_time() -> None:
    """Advancing past several due times runs the callbacks in time order, each seeing its time."""
    clock = FakeClock()
    recorder = Recorder(clock)
    clock.call_later(3.0, recorder.callback("c"))
    clock.call_later(1.0, recorder.callback("a"))
    clock.call_later(2.0, recorder.callback("b"))

    clock.advance(2.5)
    assert recorder.fired == [("a", 1.0), ("b", 2.0)]
    assert clock.now() == 2.5

    clock.advance(10.0)
    assert recorder.fired == [("a", 1.0), ("b", 2.0), ("c", 3.0)]
    assert clock.now() == 12.5


def test_callback_fires_when_advanced_exactly_to_due_time() -> None:
    """A callback due at time t runs on an advance that ends exactly at t."""
    clock = FakeClock()
    recorder = Recorder(clock)
    clock.call_later(1.0, recorder.callback("a"))

    clock.advance(1.0)

    assert recorder.names == ["a"]


def test_callbacks_due_at_the_same_time_fire_in_scheduling_order() -> None:
    """Callbacks with equal due times run in the order they were scheduled."""
    clock = FakeClock()
    recorder = Recorder(clock)
    for name in ["first", "second", "third"]:
        clock.call_later(1.0, recorder.callback(name))

    clock.advance(1.0)

    assert recorder.names == ["first", "second", "third"]


def test_each_callback_fires_only_once() -> None:
    """A callback that has run does not run again on later advances."""
    clock = FakeClock()
    recorder = Recorder(clock)
    clock.call_later(1.0, recorder.callback("a"))

    clock.advance(5.0)
    clock.advance(5.0)

    assert recorder.names == ["a"]


def test_non_positive_delay_fires_on_the_next_advance() -> None:
    """A zero or negative delay is due now: it runs on the next advance, even advance(0)."""
    clock = FakeClock(start_s=5.0)
    recorder = Recorder(clock)
    clock.call_later(0.0, recorder.callback("zero"))
    clock.call_later(-3.0, recorder.callback("negative"))

    assert recorder.fired == []
    clock.advance(0.0)

    assert recorder.fired == [("zero", 5.0), ("negative", 5.0)]


def test_cancel_prevents_firing() -> None:
    """A cancelled callback never runs; the others due in the same advance still do."""
    clock = FakeClock()
    recorder = Recorder(clock)
    clock.call_later(1.0, recorder.callback("kept"))
    timer = clock.call_later(1.0, recorder.callback("cancelled"))

    timer.cancel()
    clock.advance(10.0)

    assert recorder.names == ["kept"]


def test_cancel_is_idempotent_and_harmless_after_firing() -> None:
    """cancel() may be called twice, or after the callback ran, without effect or error."""
    clock = FakeClock()
    recorder = Recorder(clock)
    cancelled = clock.call_later(1.0, recorder.callback("cancelled"))
    fired = clock.call_later(1.0, recorder.callback("fired"))

    cancelled.cancel()
    cancelled.cancel()
    clock.advance(1.0)
    fired.cancel()
    clock.advance(1.0)

    assert recorder.names == ["fired"]


def test_callback_scheduled_by_callback_fires_within_the_same_advance_if_due() -> None:
    """A callback scheduled by a running callback runs in the same advance if due by its end."""
    clock = FakeClock()
    recorder = Recorder(clock)

    def reschedule() -> None:
        recorder.callback("outer")()
        clock.call_later(1.0, recorder.callback("inner-due"))
        clock.call_later(5.0, recorder.callback("inner-late"))

    clock.call_later(1.0, reschedule)
    clock.advance(3.0)

    # The inner delays count from the outer callback's due time (1.0), not from the advance's end.
    assert recorder.fired == [("outer", 1.0), ("inner-due", 2.0)]
    assert clock.now() == 3.0

    clock.advance(3.0)
    assert recorder.fired == [("outer", 1.0), ("inner-due", 2.0), ("inner-late", 6.0)]


def test_callbacks_run_on_the_advancing_thread() -> None:
    """Due callbacks run synchronously on the thread that calls advance()."""
    clock = FakeClock()
    threads: list[threading.Thread] = []
    clock.call_later(1.0, lambda: threads.append(threading.current_thread()))

    worker = threading.Thread(target=clock.advance, args=(1.0,))
    worker.start()
    worker.join(TIMEOUT_S)

    assert not worker.is_alive()
    assert threads == [worker]


def test_pending_timers_counts_scheduled_not_run_not_cancelled() -> None:
    """pending_timers counts callbacks that are neither run nor cancelled yet."""
    clock = FakeClock()
    assert clock.pending_timers == 0

    clock.call_later(1.0, lambda: None)
    cancelled = clock.call_later(2.0, lambda: None)
    clock.call_later(3.0, lambda: None)
    assert clock.pending_timers == 3

    cancelled.cancel()
    assert clock.pending_timers == 2

    clock.advance(1.0)
    assert clock.pending_timers == 1

    clock.advance(5.0)
    assert clock.pending_timers == 0


def test_call_later_from_another_thread() -> None:
    """Callbacks scheduled from other threads are all kept and fire on the next advance past."""
    clock = FakeClock()
    fired: list[int] = []
    lock = threading.Lock()

    def schedule(index: int) -> None:
        def record() -> None:
            with lock:
                fired.append(index)

        clock.call_later(float(index), record)

    workers = [threading.Thread(target=schedule, args=(index,)) for index in range(1, 9)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(TIMEOUT_S)
    assert not any(worker.is_alive() for worker in workers)
    assert clock.pending_timers == 8

    clock.advance(8.0)

    assert fired == list(range(1, 9))
