"""InFlight: how many requests each model is answering now, for the in-flight gauge."""

from __future__ import annotations

import threading
from typing import final


@final
class InFlight:
    """Counts requests per model between :meth:`enter` and :meth:`leave`.

    Counts every request of the DataPlane, whether or not the server bounds
    requests in flight, so an autoscaler can always read the gauge.  A model
    whose count drops to 0 is forgotten: the names are the clients', and
    only those with requests in flight are kept (the gauge lists the served
    models with 0 itself).
    Thread-safe (one lock, held for a dict update).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}  # guarded by: _lock

    def enter(self, model_name: str) -> None:
        """One more request of ``model_name`` in flight."""
        with self._lock:
            self._counts[model_name] = self._counts.get(model_name, 0) + 1

    def leave(self, model_name: str) -> None:
        """One request of ``model_name`` ended.  Requires: an :meth:`enter` for it before."""
        with self._lock:
            count = self._counts[model_name] - 1
            if count:
                self._counts[model_name] = count
            else:
                del self._counts[model_name]

    def snapshot(self) -> dict[str, int]:
        """Requests in flight by model (models with none are left out)."""
        with self._lock:
            return dict(self._counts)
