"""ServingMap: the versions that serve now, published whole for lock-free lookups."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, final

import attrs

from servinglib.core.servable_handle import ServableHandle, ServingEntry
from servinglib.core.servable_id import ServableId
from servinglib.core.servable_request import AutoVersionPolicy, ServableRequest


@final
class ServingMap:
    """Which versions serve, for the request path.

    Writers (the manager's load and unload threads) build a new immutable
    mapping and swap it in whole under a lock; readers take the current
    mapping with one attribute read, so :meth:`acquire` takes no lock but
    the found entry's own.
    Thread-safe.
    """

    def __init__(self) -> None:
        self._write_lock = threading.Lock()
        self._by_name: Mapping[str, _Versions] = {}  # replaced under _write_lock, read lock-free

    def acquire(self, request: ServableRequest) -> ServableHandle[Any] | None:
        """A handle to the version ``request`` selects, or None if none serves."""
        while True:
            versions = self._by_name.get(request.name)
            entry = versions.find(request) if versions is not None else None
            if entry is None:
                return None
            if entry.try_acquire():
                return ServableHandle(entry)
            # The entry closed after we read the map: the map was swapped, look again.

    def find(self, request: ServableRequest) -> ServableId | None:
        """The version ``request`` selects now, without acquiring it; None if none serves."""
        versions = self._by_name.get(request.name)
        entry = versions.find(request) if versions is not None else None
        return entry.id if entry is not None else None

    def ids(self) -> list[ServableId]:
        """Every serving version, sorted."""
        return sorted(e.id for versions in self._by_name.values() for e in versions.entries)

    def add(self, servable_id: ServableId, servable: Any) -> None:  # noqa: ANN401 - any platform's object
        """Starts serving ``servable`` as ``servable_id``.

        Requires: ``servable_id`` does not serve yet.
        """
        entry = ServingEntry(servable_id, servable)
        with self._write_lock:
            by_name = dict(self._by_name)
            old = by_name.get(servable_id.name)
            by_name[servable_id.name] = _Versions.of((*(old.entries if old else ()), entry))
            self._by_name = by_name

    def remove(self, servable_id: ServableId) -> ServingEntry | None:
        """Stops handing out ``servable_id``; returns its entry (to wait on its handles)."""
        with self._write_lock:
            by_name = dict(self._by_name)
            old = by_name.get(servable_id.name)
            if old is None or servable_id.version not in old.by_version:
                return None
            rest = tuple(e for e in old.entries if e.id != servable_id)
            if rest:
                by_name[servable_id.name] = _Versions.of(rest)
            else:
                del by_name[servable_id.name]
            self._by_name = by_name
            return old.by_version[servable_id.version]


@final
@attrs.frozen
class _Versions:
    """The serving versions of one name, sorted by version (immutable)."""

    entries: tuple[ServingEntry, ...]
    by_version: Mapping[int, ServingEntry]

    @classmethod
    def of(cls, entries: tuple[ServingEntry, ...]) -> _Versions:
        ordered = tuple(sorted(entries, key=lambda e: e.id.version))
        return cls(ordered, {e.id.version: e for e in ordered})

    def find(self, request: ServableRequest) -> ServingEntry | None:
        if request.version is not None:
            return self.by_version.get(request.version)
        if request.auto_version_policy is AutoVersionPolicy.LATEST:
            return self.entries[-1]
        return self.entries[0]
