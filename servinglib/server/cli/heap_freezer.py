"""HeapFreezer: keeps the interpreter's long-lived objects out of full garbage collections."""

from __future__ import annotations

import enum
import gc
import logging
import sys
import threading
import time
from typing import final

from servinglib.core.servable_id import ServableId
from servinglib.core.servable_state import ManagerState, ServableState

_log = logging.getLogger(__name__)

DEFAULT_MAX_UNFROZEN_OBJECTS = 50_000
"""Unfrozen objects tolerated after a version change (a full collection walks them: ~25 ms)."""


class HeapAction(enum.Enum):
    """What :meth:`HeapFreezer.refreeze_if_changed` did."""

    NONE = "none"  # nothing changed, or the unfrozen heap is small enough to leave as it is
    FREEZE_NEW = "freeze new"  # collected the unfrozen objects, froze the survivors
    REFREEZE = "refreeze"  # a frozen version ended: unfroze, collected and froze everything


@final
class HeapFreezer:
    """Freezes the heap's base, then only growth past a bound; refreezes when frozen models end.

    Call :meth:`freeze` before the models load (after importing the
    runtimes they need), pass :meth:`on_state` to
    ``ServerCore(state_listeners=...)``, and call :meth:`refreeze_if_changed`
    periodically: it does nothing unless versions changed, and pauses for a
    whole-heap collection only when a version that was frozen has ended.
    Thread-safe.
    """

    def __init__(self, max_unfrozen_objects: int = DEFAULT_MAX_UNFROZEN_OBJECTS) -> None:
        self._max_unfrozen_objects = max_unfrozen_objects
        self._lock = threading.Lock()
        self._changed = False  # guarded by: _lock
        self._frozen_ended = False  # guarded by: _lock
        self._live: set[ServableId] = set()  # loading or loaded; guarded by: _lock
        self._frozen: set[ServableId] = set()  # live at a freeze; guarded by: _lock
        # sys.getallocatedblocks() when objects were last counted (a hint: no lock needed)
        self._blocks_at_count = 0

    def on_state(self, event: ServableState) -> None:
        """Follows which versions are live and whether one ended (an event-bus listener)."""
        state = event.manager_state
        with self._lock:
            if state in {ManagerState.LOADING, ManagerState.AVAILABLE}:
                self._live.add(event.id)
            if state is ManagerState.AVAILABLE:
                self._changed = True
            elif state is ManagerState.END:
                self._changed = True
                self._live.discard(event.id)
                if event.id in self._frozen:
                    self._frozen.discard(event.id)
                    self._frozen_ended = True

    def refreeze_if_changed(self) -> HeapAction:
        """After version changes: refreezes, freezes what is new, or nothing; which it did."""
        with self._lock:
            changed, self._changed = self._changed, False
            frozen_ended, self._frozen_ended = self._frozen_ended, False
        if frozen_ended:
            self.refreeze()
            return HeapAction.REFREEZE
        if changed and self._unfrozen_past_bound():
            self.freeze()
            return HeapAction.FREEZE_NEW
        return HeapAction.NONE

    def _unfrozen_past_bound(self) -> bool:
        """Whether more objects than the bound are unfrozen; counted only if the heap grew.

        Counting the unfrozen objects (``gc.get_objects()``) holds the GIL for
        about 20 ns per object, milliseconds with many models; the interpreter's
        count of allocated memory blocks is free, and every tracked object
        takes at least one.  So the objects are counted only once that count
        has grown by half the bound since they last were.
        """
        blocks = sys.getallocatedblocks()
        if blocks - self._blocks_at_count <= self._max_unfrozen_objects // 2:
            return False
        self._blocks_at_count = blocks
        return len(gc.get_objects()) > self._max_unfrozen_objects

    def freeze(self) -> None:
        """Collects the unfrozen objects and freezes the survivors (the frozen are left alone)."""
        started = time.perf_counter()
        gc.collect()
        self._freeze_live()
        _log.debug(
            "Heap frozen: %d objects in %.1f ms",
            gc.get_freeze_count(),
            (time.perf_counter() - started) * 1e3,
        )

    def refreeze(self) -> None:
        """Collects everything (frozen objects included) and freezes what is alive."""
        started = time.perf_counter()
        gc.unfreeze()
        gc.collect()
        self._freeze_live()
        _log.debug(
            "Heap refrozen: %d objects in %.1f ms",
            gc.get_freeze_count(),
            (time.perf_counter() - started) * 1e3,
        )

    def _freeze_live(self) -> None:
        gc.freeze()
        self._blocks_at_count = sys.getallocatedblocks()
        # Read after the freeze: a version that went live meanwhile counts as frozen, so its end
        # costs a refreeze at worst, never a leak.
        with self._lock:
            self._frozen = set(self._live)
