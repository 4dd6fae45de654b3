"""FakeClock: a Clock that moves only when a test advances it."""

from __future__ import annotations

import heapq
import itertools
import threading
from collections.abc import Callable
from typing import final

from servinglib.core.clock import Clock, Timer


@final
class FakeClock(Clock):
    """Time stands still until :meth:`advance`; due callbacks then run on the advancing thread.

    Thread-safe.
    """

    def __init__(self, start_s: float = 0.0) -> None:
        self._lock = threading.Lock()
        self._now = start_s  # guarded by: _lock
        self._queue: list[tuple[float, int, _FakeTimer]] = []  # guarded by: _lock
        self._order = itertools.count()

    def now(self) -> float:
        with self._lock:
            return self._now

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> Timer:
        timer = _FakeTimer(callback)
        with self._lock:
            heapq.heappush(self._queue, (self._now + max(0.0, delay_s), next(self._order), timer))
        return timer

    def advance(self, seconds: float) -> None:
        """Moves time forward, running each callback that falls due, in time order."""
        with self._lock:
            target = self._now + seconds
        while True:
            with self._lock:
                if not self._queue or self._queue[0][0] > target:
                    self._now = target
                    return
                due, _, timer = heapq.heappop(self._queue)
                self._now = due
            timer.fire()

    @property
    def pending_timers(self) -> int:
        """Callbacks scheduled and neither run nor cancelled."""
        with self._lock:
            return sum(1 for _, _, timer in self._queue if not timer.cancelled)


@final
class _FakeTimer(Timer):
    def __init__(self, callback: Callable[[], None]) -> None:
        self._callback = callback
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True

    def fire(self) -> None:
        if not self.cancelled:
            self.cancelled = True
            self._callback()
