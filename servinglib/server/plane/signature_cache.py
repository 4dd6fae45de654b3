"""SignatureCache: the version a model spec selects and its signatures, without a lookup each."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import final

from servinglib.core.servable_state import ServableState
from servinglib.servable import SignatureSpec
from servinglib.server.model_spec import ModelSpec
from servinglib.server.server_core import ServerCore

_Key = tuple[str, int | None]
_Entry = tuple[ModelSpec, Mapping[str, SignatureSpec]]


@final
class SignatureCache:
    """Maps a ModelSpec to (the specific version's ModelSpec, its signatures).

    Thread safety: :meth:`lookup` is lock-free on hits and may be called from
    any thread; misses and invalidations take a lock.  Call :meth:`close`
    to stop listening to the core's events.
    """

    def __init__(self, core: ServerCore) -> None:
        self._core = core
        self._lock = threading.Lock()
        self._entries: dict[_Key, _Entry] = {}  # replaced whole on invalidation; guarded by: _lock
        self._generation = 0  # guarded by: _lock
        self._subscription = core.event_bus.subscribe(self._on_state)

    def lookup(self, spec: ModelSpec) -> _Entry:
        """The specific-version spec ``spec`` selects now and that version's signatures.

        Raises what :meth:`ServerCore.model_metadata` raises (NotFoundError, ...).
        """
        if spec.version_label is not None:
            metadata = self._core.model_metadata(spec)
            return ModelSpec.specific(spec.name, metadata.version), metadata.signatures
        key = (spec.name, spec.version)
        entry = self._entries.get(key)
        if entry is not None:
            return entry
        generation = self._generation
        metadata = self._core.model_metadata(spec)
        entry = (ModelSpec.specific(spec.name, metadata.version), metadata.signatures)
        with self._lock:
            if generation == self._generation:
                self._entries[key] = entry
        return entry

    def _on_state(self, _state: ServableState) -> None:
        with self._lock:
            self._generation += 1
            self._entries = {}

    def close(self) -> None:
        """Stops following the core's state events (the cache then only misses)."""
        self._subscription.cancel()
        with self._lock:
            self._generation += 1
            self._entries = {}
