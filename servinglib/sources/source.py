"""Source: emits the aspired versions of the servables it knows about."""

from __future__ import annotations

import abc
import logging
import threading
from collections.abc import Sequence
from typing import Generic, TypeAlias, TypeVar

from servinglib.core.servable_data import AspiredVersionsCallback, ServableData
from servinglib.errors import FailedPreconditionError

_log = logging.getLogger(__name__)

T = TypeVar("T")

StoragePath: TypeAlias = str
"""Where a servable version's files are: a directory path (TF Serving's ``StoragePath``)."""


class Source(abc.ABC, Generic[T]):
    """Tells one downstream Target which versions of each servable it should have.

    A source calls its aspired-versions callback (set once, by
    :func:`servinglib.sources.connect`) with, per servable name, the complete
    set of versions it wants: a version left out is to be unloaded, an empty
    set unloads the name altogether.  Subclasses call
    :meth:`emit_aspired_versions`; what they emit before the callback is set is
    kept (the latest set per name) and delivered when it is set.
    Thread-safe.
    """

    def __init__(self) -> None:
        self._emit_lock = threading.Lock()
        self._callback: AspiredVersionsCallback[T] | None = None  # guarded by: _emit_lock
        self._held: dict[str, tuple[ServableData[T], ...]] = {}  # guarded by: _emit_lock

    def set_aspired_versions_callback(self, callback: AspiredVersionsCallback[T]) -> None:
        """Connects the source to its target; may be called once.

        Requires: not called before (else FailedPreconditionError).
        """
        with self._emit_lock:
            if self._callback is not None:
                raise FailedPreconditionError(f"{type(self).__name__} is already connected")
            self._callback = callback
            held, self._held = self._held, {}
            for name, versions in held.items():
                try:
                    callback(name, versions)
                except Exception:  # noqa: BLE001 - one bad delivery must not lose the others
                    _log.exception("delivering aspired versions of %s failed", name)
        self._on_connected()

    def _on_connected(self) -> None:
        """Hook: runs once the callback is set (e.g. to start polling).  Default: nothing."""

    def emit_aspired_versions(
        self, servable_name: str, versions: Sequence[ServableData[T]]
    ) -> None:
        """Sends ``versions`` as the complete aspired set of ``servable_name`` downstream.

        Emissions are serialized, so the target sees them in the order made.
        """
        with self._emit_lock:
            if self._callback is None:
                self._held[servable_name] = tuple(versions)
                return
            self._callback(servable_name, versions)
