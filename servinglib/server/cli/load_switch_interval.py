"""LoadSwitchInterval: a shorter GIL switch interval while versions load or unload.

A load is mostly Python work on a load thread (TensorFlow's restore of a
SavedModel: 0.3-0.6 s for 300 MB here).  Meanwhile the event loop and the
worker pool wait for the GIL each time they want it, until the loading
thread is made to drop it: after ``sys.getswitchinterval()``, 5 ms by
default.  A request wants the GIL several times (the loop, the pool, the
loop again), so during a load its latency grows by up to 5 ms per hand-off
(bench/lifecycle_latency.py: the serving model's p99 1.7-1.9 x steady while a
300 MB SavedModel loads and unloads; a thread asking to wake every
millisecond beside the load waits 5-10 ms at worst).  With 1 ms it waits
1-2 ms.  Shorter slices cost more GIL hand-offs, so the interval is
shortened only while a load or unload is in flight, and restored after.
"""

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
