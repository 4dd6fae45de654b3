"""EventBus: synchronous publish/subscribe of one event type."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Generic, TypeVar, final

_log = logging.getLogger(__name__)

E = TypeVar("E")


@final
class Subscription:
    """A live subscription; :meth:`cancel` (or leaving a ``with`` block) ends it.

    Thread-safe.
    """

    def __init__(self, cancel: Callable[[], None]) -> None:
        self._cancel: Callable[[], None] | None = cancel

    def cancel(self) -> None:
        """Stops delivery; idempotent.  Events being delivered right now may still arrive."""
        cancel, self._cancel = self._cancel, None
        if cancel is not None:
            cancel()

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.cancel()


@final
class EventBus(Generic[E]):
    """Delivers each published event to every subscriber, in publish order.

    Callbacks run synchronously on the publishing thread, one event at a time
    (publishes are serialized), so every subscriber sees the same order.  A
    callback that raises is logged and does not stop the others.
    Important: callbacks must be quick and must not publish on the same bus.
    Thread-safe.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._subscribers: tuple[tuple[object, Callable[[E], None]], ...] = ()  # guarded by: _lock

    def subscribe(self, callback: Callable[[E], None]) -> Subscription:
        """Calls ``callback(event)`` for every event published from now on."""
        token = object()
        with self._lock:
            self._subscribers = (*self._subscribers, (token, callback))

        def cancel() -> None:
            with self._lock:
                self._subscribers = tuple(s for s in self._subscribers if s[0] is not token)

        return Subscription(cancel)

    def publish(self, event: E) -> None:
        """Delivers ``event`` to all current subscribers before returning."""
        with self._lock:
            for _, callback in self._subscribers:
                try:
                    callback(event)
                except Exception:  # noqa: BLE001 - one bad subscriber must not silence the rest
                    _log.exception("event bus subscriber %r raised on %r", callback, event)
