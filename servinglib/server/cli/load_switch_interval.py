"""LoadSwitchInterval: a shorter GIL switch interval while versions load or unload."""

from __future__ import annotations

import sys
import threading
from typing import final

from servinglib.core.servable_id import ServableId
from servinglib.core.servable_state import ManagerState, ServableState

LOADING_SWITCH_INTERVAL_S = 0.001
"""The GIL switch interval while versions load or unload."""


@final
class LoadSwitchInterval:
    """Sets the interpreter's switch interval to 1 ms while any version loads or unloads.

    Pass :meth:`on_state` to ``ServerCore(state_listeners=...)``.  The
    interval in force when the first load starts is restored when the last
    one in flight ends (available, or ended).  Process-wide, as the
    interval is: for a process that serves (the CLI), not for a library.
    Thread-safe.
    """

    def __init__(self, interval_s: float = LOADING_SWITCH_INTERVAL_S) -> None:
        self._interval_s = interval_s
        self._lock = threading.Lock()
        self._in_flight: set[ServableId] = set()  # guarded by: _lock
        self._restore_s: float | None = None  # guarded by: _lock

    def on_state(self, event: ServableState) -> None:
        """Follows loads and unloads in flight (an event-bus listener)."""
        state = event.manager_state
        with self._lock:
            if state in {ManagerState.LOADING, ManagerState.UNLOADING}:
                self._in_flight.add(event.id)
            else:
                self._in_flight.discard(event.id)
            if self._in_flight and self._restore_s is None:
                self._restore_s = sys.getswitchinterval()
                sys.setswitchinterval(self._interval_s)
            elif not self._in_flight and self._restore_s is not None:
                sys.setswitchinterval(self._restore_s)
                self._restore_s = None
