"""FakeSource: a Source whose aspired versions a test sets by hand."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Generic, TypeVar, final

from servinglib.core.servable_data import ServableData
from servinglib.core.servable_id import ServableId
from servinglib.errors import ServingError
from servinglib.sources.source import Source

T = TypeVar("T")


@final
class FakeSource(Source[T], Generic[T]):
    """A Source a test drives by hand: each :meth:`set_aspired_versions` emits one complete set.

    ``FakeSource[Loader]`` feeds a manager directly; ``FakeSource[StoragePath]``
    feeds adapters and routers.  Sets emitted before the source is connected
    are held (the latest per name) and delivered by ``connect``, as with
    every Source.
    Thread-safe.
    """

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._current: dict[str, tuple[ServableData[T], ...]] = {}  # guarded by: _lock

    def set_aspired_versions(
        self,
        servable_name: str,
        versions: Mapping[int, T | ServingError] | Iterable[ServableData[T]],
    ) -> None:
        """Emits the complete aspired set of ``servable_name``.

        ``versions`` maps version → data (a :class:`ServingError` value makes
        that version an error item), or is a sequence of ServableData items,
        emitted as given (so a test can also send a target a malformed set).
        An empty set unloads every version of the name.
        """
        items = _items(servable_name, versions)
        with self._lock:
            self._current[servable_name] = items
            # Emitting under our lock keeps current() in step with the emission order.
            self.emit_aspired_versions(servable_name, items)

    def remove_version(self, servable_id: ServableId) -> None:
        """Emits the last set of ``servable_id.name`` without that version.

        Requires: a set was emitted for the name (else KeyError).
        """
        with self._lock:
            items = tuple(i for i in self._current[servable_id.name] if i.id != servable_id)
            self._current[servable_id.name] = items
            self.emit_aspired_versions(servable_id.name, items)

    def current(self, servable_name: str) -> tuple[ServableData[T], ...] | None:
        """The last set emitted for ``servable_name``, or None if none was."""
        with self._lock:
            return self._current.get(servable_name)


def _items(
    servable_name: str, versions: Mapping[int, T | ServingError] | Iterable[ServableData[T]]
) -> tuple[ServableData[T], ...]:
    if not isinstance(versions, Mapping):
        return tuple(versions)
    items: list[ServableData[T]] = []
    for version, data in versions.items():
        servable_id = ServableId(servable_name, version)
        if isinstance(data, ServingError):
            items.append(ServableData.failed(servable_id, data))
        else:
            items.append(ServableData.of(servable_id, data))
    return tuple(items)
