"""InFlight: how many requests each model is answering now: the bound and the gauge's count."""

from __future__ import annotations

import threading
from typing import final

from servinglib.errors import UnavailableError


@final
class InFlight:
    """Counts requests per model between :meth:`enter` and :meth:`leave`, within a bound.

    With ``limit`` (``max_requests_in_flight_per_model``), a request past it
    is refused at once; either way every request is counted.  A model whose
    count drops to 0 is forgotten (the names are the clients').
    Thread-safe (one lock, held for a dict update).
    """

    def __init__(self, limit: int | None = None) -> None:
        self._limit = limit
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}  # guarded by: _lock

    def enter(self, model_name: str) -> None:
        """One more request of ``model_name`` in flight.

        Raises UnavailableError (503 / UNAVAILABLE: retry later) when the
        model is at its limit; the request then counts for nothing.
        """
        with self._lock:
            count = self._counts.get(model_name, 0)
            if self._limit is not None and count >= self._limit:
                raise UnavailableError(
                    f"Model {model_name} is at its limit of {self._limit} requests in flight; "
                    "retry later"
                )
            self._counts[model_name] = count + 1

    def leave(self, model_name: str) -> None:
        """One request of ``model_name`` ended.  Requires: an :meth:`enter` for it before."""
        with self._lock:
            count = self._counts[model_name] - 1
            if count:
                self._counts[model_name] = count
            else:
                del self._counts[model_name]

    def count(self, model_name: str) -> int:
        """Requests of ``model_name`` in flight now."""
        return self._counts.get(model_name, 0)  # one dict read: atomic

    def snapshot(self) -> dict[str, int]:
        """Requests in flight by model (models with none are left out)."""
        with self._lock:
            return dict(self._counts)
