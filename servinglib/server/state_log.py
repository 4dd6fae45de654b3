"""ServableStateLog: one log line per version state change, from the library's own logger."""

from __future__ import annotations

import logging
import time
from typing import final

from servinglib.core.servable_state import ManagerState, ServableState
from servinglib.core.transition_times import TransitionTimes

# The name the CLI has always shown these lines under; the library adds no handler.
_log = logging.getLogger("servinglib.server")


@final
class ServableStateLog:
    """Logs loads, unloads and failures of versions, with how long each load or unload took.

    ``loading`` / ``unloading`` and ``available`` / ``unloaded`` at INFO,
    ``failed`` (a version ending with an error) at ERROR.  ServerCore
    subscribes one to its event bus, so an embedding application sees the
    lines once it configures logging, and the CLI shows the same lines.
    Thread-safe: :meth:`on_state` may be called from any publishing thread.
    """

    def __init__(self) -> None:
        self._times = TransitionTimes()

    def on_state(self, event: ServableState) -> None:
        """Logs ``event`` (an event bus subscriber)."""
        took_s = self._times.observe(event, time.monotonic())
        state = event.manager_state
        name = f"{event.id.name} v{event.id.version}"
        if state in {ManagerState.LOADING, ManagerState.UNLOADING}:
            _log.info("%s %s", name, "loading" if state is ManagerState.LOADING else "unloading")
            return
        if state is ManagerState.START:
            return
        took = f" in {took_s:.2f} s" if took_s is not None else ""
        if state is ManagerState.AVAILABLE:
            _log.info("%s available%s", name, took)
        elif event.health is not None:
            _log.error("%s failed%s: %s", name, took, event.health)
        else:
            _log.info("%s unloaded%s", name, took)
