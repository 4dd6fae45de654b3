"""StreamBudget: the bytes of stream parts made and not yet handed to a client, server-wide."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, final

import numpy as np

if TYPE_CHECKING:
    from servinglib.server.plane.streaming import Part


@final
class StreamBudget:
    """At most ``max_bytes`` charged at once; a charge past it waits for releases.

    An ``urgent`` charge (a part its reader waits for) may use the whole
    budget, any other three quarters of it.  One charge is let in whatever
    its size when nothing is charged.  Charges and releases come from any
    event loop and any thread.
    Thread-safe (one lock; waiters are woken on their own loops).
    """

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be at least 1, got {max_bytes}")
        self._max_bytes = max_bytes
        self._behind_bytes = max_bytes - max_bytes // 4  # what charges not urgent may reach
        self._lock = threading.Lock()
        self._used = 0  # guarded by: _lock
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        # guarded by: _lock

    @property
    def max_bytes(self) -> int:
        """The bound."""
        return self._max_bytes

    @property
    def used(self) -> int:
        """The bytes charged now."""
        with self._lock:
            return self._used

    def has_room(self, extra: int = 0) -> bool:
        """Whether ``extra`` more bytes than are charged now would fit a charge not urgent."""
        with self._lock:
            return self._used + extra < self._behind_bytes

    def try_charge(self, nbytes: int, *, urgent: bool = False) -> bool:
        """Charges ``nbytes`` if they fit now (or nothing is charged); whether it did."""
        with self._lock:
            if not self._fits_locked(nbytes, urgent):
                return False
            self._used += nbytes
            return True

    async def charge(self, nbytes: int, urgent: Callable[[], bool] = lambda: False) -> None:
        """Charges ``nbytes``, waiting on this event loop until they fit.

        ``urgent`` says, at each try, whether the part's reader waits for it.
        Cancelling the wait charges nothing.
        """
        loop = asyncio.get_running_loop()
        while not self.try_charge(nbytes, urgent=urgent()):
            waiter: asyncio.Future[None] = loop.create_future()
            with self._lock:
                if self._fits_locked(nbytes, urgent()):
                    continue  # released meanwhile: try again
                self._waiters.append((loop, waiter))
            try:
                await waiter
            finally:
                with self._lock:
                    if (loop, waiter) in self._waiters:
                        self._waiters.remove((loop, waiter))

    def wake(self) -> None:
        """Has the waiting charges try again (one of them became urgent)."""
        self.release(0)

    def release(self, nbytes: int) -> None:
        """Gives back ``nbytes`` charged before; wakes the charges waiting to try again."""
        with self._lock:
            self._used -= nbytes
            waiters, self._waiters = self._waiters, []
        for loop, waiter in waiters:
            with contextlib.suppress(RuntimeError):  # its loop is closed: nobody waits there
                loop.call_soon_threadsafe(_wake, waiter)

    def _fits_locked(self, nbytes: int, urgent: bool) -> bool:
        limit = self._max_bytes if urgent else self._behind_bytes
        return not self._used or self._used + nbytes <= limit


def part_bytes(part: Part) -> int:
    """What a part holds: its arrays' bytes, and the bytes of their string elements."""
    total = 0
    for array in part.values():
        total += array.nbytes
        if array.dtype.kind == "O":
            total += sum(_item_bytes(item) for item in np.ravel(array))
    return total


def _item_bytes(item: Any) -> int:  # noqa: ANN401 - an element of an object array
    return len(item) if isinstance(item, bytes | str) else 0


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
