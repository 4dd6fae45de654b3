"""TransitionTimes: how long each version spent loading or unloading, from its state events."""

from __future__ import annotations

import threading
from typing import final

from servinglib.core.servable_id import ServableId
from servinglib.core.servable_state import ManagerState, ServableState

_TIMED = frozenset({ManagerState.LOADING, ManagerState.UNLOADING})


@final
class TransitionTimes:
    """Times the LOADING and UNLOADING phases of versions from the events that bound them.

    Feed it every :class:`ServableState` event, in order, with the time it
    was seen; :meth:`observe` answers, for the event that ends a phase (the
    AVAILABLE or END after LOADING, the END after UNLOADING), how long the
    phase took.  Used by the state log and the load-time metric alike.
    Thread-safe: publishers may call it from any thread.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._since: dict[ServableId, float] = {}  # guarded by: _lock

    def observe(self, event: ServableState, time_s: float) -> float | None:
        """Seconds since ``event``'s version began loading or unloading, if this ends that phase.

        None for an event that begins a phase or follows none.
        """
        with self._lock:
            if event.manager_state in _TIMED:
                self._since[event.id] = time_s
                return None
            started = self._since.pop(event.id, None)
        return None if started is None else time_s - started
