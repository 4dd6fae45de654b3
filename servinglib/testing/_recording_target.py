"""RecordingTarget: a Target that remembers every aspired-versions call it gets."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Generic, TypeVar, final

import attrs

from servinglib.core.servable_data import ServableData
from servinglib.sources.target import TargetBase

T = TypeVar("T")


@final
@attrs.frozen
class AspiredVersionsCall(Generic[T]):
    """One call: the servable name, its complete aspired set, and when (``time.perf_counter``)."""

    name: str
    versions: tuple[ServableData[T], ...]
    time_s: float

    @property
    def version_numbers(self) -> tuple[int, ...]:
        """The aspired version numbers, in the order emitted."""
        return tuple(item.id.version for item in self.versions)


@final
class RecordingTarget(TargetBase[T], Generic[T]):
    """Records each ``(name, versions)`` a Source sends, for asserting on a Source's output.

    ``connect(my_source, target)``, then look at :meth:`calls` or :meth:`last`.
    Thread-safe.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: list[AspiredVersionsCall[T]] = []  # guarded by: _lock

    def set_aspired_versions(self, servable_name: str, versions: Sequence[ServableData[T]]) -> None:
        call = AspiredVersionsCall(servable_name, tuple(versions), time.perf_counter())
        with self._lock:
            self._calls.append(call)

    def calls(self, name: str | None = None) -> list[AspiredVersionsCall[T]]:
        """Every call so far (for ``name`` only, if given), oldest first."""
        with self._lock:
            return [c for c in self._calls if name is None or c.name == name]

    def last(self, name: str) -> tuple[ServableData[T], ...] | None:
        """The last aspired set sent for ``name``, or None if none was."""
        found = self.calls(name)
        return found[-1].versions if found else None

    def clear(self) -> None:
        """Forgets the calls recorded so far."""
        with self._lock:
            self._calls.clear()
