"""ServableHandle: a short-lived, ref-counted reference to a loaded servable."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar, final

from servinglib.core.servable_id import ServableId

T = TypeVar("T")


@final
class ServableHandle(Generic[T]):
    """Keeps one loaded servable version from being unloaded while held.

    Take it, use :attr:`servable`, release it (``with manager.servable_handle(...)
    as handle:``).  An unload of the version waits for every handle taken
    before it to be released, so a request holding a handle always completes.
    Hold handles briefly: a held handle delays unloading.  A handle that is
    garbage-collected unreleased is released then.
    Thread safety: release() is idempotent and may be called from any thread;
    the servable object is as thread-safe as its platform makes it.
    """

    __slots__ = ("_entry", "_on_release", "id", "servable")

    def __init__(self, entry: ServingEntry) -> None:
        self._entry: ServingEntry | None = entry
        self._on_release: Callable[[], None] | None = None
        self.id: ServableId = entry.id
        self.servable: T = entry.servable

    def add_release_callback(self, callback: Callable[[], None]) -> None:
        """Calls ``callback()`` when the handle is released (e.g. to count requests in flight).

        Requires: the handle is not released yet; at most one callback.
        """
        self._on_release = callback

    def release(self) -> None:
        """Gives the reference back; idempotent."""
        entry, self._entry = self._entry, None
        if entry is not None:
            entry.release()
            if self._on_release is not None:
                self._on_release()

    def __enter__(self) -> ServableHandle[T]:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.release()

    def __del__(self) -> None:
        if getattr(self, "_entry", None) is not None:
            self.release()

    def __repr__(self) -> str:
        return f"ServableHandle({self.id}{'' if self._entry else ', released'})"


@final
class ServingEntry:
    """A servable version in the serving map, counting the handles taken to it.

    Protocol: readers find the entry in an immutable map and call
    :meth:`try_acquire`; the unloader first publishes a map without the entry,
    then calls :meth:`close_and_wait`.  A reader that raced the swap sees the
    entry closed and looks again in the new map, so after close_and_wait
    returns no handle to the entry exists or will be handed out.
    Thread-safe.
    """

    __slots__ = ("_closed", "_cond", "_count", "_lock", "id", "servable")

    def __init__(self, servable_id: ServableId, servable: Any) -> None:  # noqa: ANN401 - any platform's object
        self.id = servable_id
        self.servable = servable
        # A plain Lock on the request path (a Condition's `with` runs Python
        # code, ~100 ns more per acquire); the Condition only for the unloader.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._count = 0  # guarded by: _lock
        self._closed = False  # guarded by: _lock

    def try_acquire(self) -> bool:
        """Counts one more handle, unless the entry is closed."""
        with self._lock:
            if self._closed:
                return False
            self._count += 1
            return True

    def release(self) -> None:
        """Counts one handle less; wakes the unloader after the last one."""
        with self._lock:
            self._count -= 1
            if self._closed and self._count == 0:
                self._cond.notify_all()

    @property
    def handle_count(self) -> int:
        """Handles taken and not yet released."""
        return self._count

    def close_and_wait(self, timeout_s: float | None = None) -> bool:
        """Refuses new handles, then waits until every handle taken is released.

        True once none is held; False if ``timeout_s`` passed first (call
        again to go on waiting).
        Requires: the entry is no longer in the published serving map.
        """
        with self._cond:
            self._closed = True
            return self._cond.wait_for(lambda: self._count == 0, timeout_s)
