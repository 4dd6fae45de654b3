"""FileSystemStoragePathSource: aspires the version directories found under base paths."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import final

from servinglib.core.clock import Clock, Timer
from servinglib.sources._base_path_polling import BasePathPolling
from servinglib.sources.base_path_scan import BARE_MODEL_VERSION, Scan, scan_base_path
from servinglib.sources.fs_event_trigger import FsEventTrigger
from servinglib.sources.remote_store import is_remote
from servinglib.sources.storage_path_source_config import (
    FileSystemStoragePathSourceConfig,
    ServableToMonitor,
)

# Defined beside their users now; importable from here as in earlier releases.
__all__ = [
    "BARE_MODEL_VERSION",
    "FileSystemStoragePathSource",
    "FileSystemStoragePathSourceConfig",
    "ServableToMonitor",
]

_CLOCK_SLACK_S = 1e-3  # a timer may fire a hair before the clock says its time came


@final
class FileSystemStoragePathSource(BasePathPolling):
    """Polls base paths for version directories and aspires those the version policy picks.

    Version directories, bare models, settling and faults:
    docs/guides/file-system-source.md.  A version still being copied never
    displaces the one serving; a base path that is missing, unreadable or
    not a directory keeps the previous set (nothing is unloaded).  An
    object-store base path is refused (InvalidArgumentError): see
    :class:`RemoteStoragePathSource`.  ``in_use`` is deprecated and unused.
    Thread-safe.
    """

    def __init__(
        self,
        config: FileSystemStoragePathSourceConfig,
        *,
        clock: Clock | None = None,
        in_use: Callable[[str], Collection[int]] | None = None,
    ) -> None:
        if in_use is not None:
            warnings.warn(
                "FileSystemStoragePathSource(in_use=...) is deprecated and unused: "
                "RemoteStoragePathSource (or BasePathSource) takes it",
                DeprecationWarning,
                stacklevel=2,
            )
        super().__init__(config, clock=clock)
        # One timer for the whole source: the earliest end of a settle window.
        self._settle_timer: tuple[float, Timer] | None = None  # guarded by: _lock
        self._settle_due: dict[str, float] = {}  # guarded by: _lock
        self._events = FsEventTrigger(self._on_fs_event)
        # Replaced whole (by the watching thread), read without a lock.
        self._by_base: (
            tuple[FileSystemStoragePathSourceConfig, Mapping[str, frozenset[str]]] | None
        ) = None

    def poll_once(self) -> None:
        """Polls every servable now and emits each one's aspired versions (not after close)."""
        super().poll_once()
        self._sync_watches()

    def close(self) -> None:
        """Stops polling and watching; idempotent.  Emits nothing more once it returns."""
        super().close()
        with self._lock:
            settle_timer, self._settle_timer = self._settle_timer, None
        if settle_timer is not None:
            settle_timer[1].cancel()
        self._events.close()

    # -- looking at a base path -----------------------------------------------

    def _refusal(self, servable: ServableToMonitor) -> str | None:
        if is_remote(servable.base_path):
            return (
                f"its base path {servable.base_path} is in an object store; "
                "RemoteStoragePathSource serves those (BasePathSource, which ServerCore uses, "
                "serves both kinds)"
            )
        return None

    def _scan(self, servable: ServableToMonitor, *, full: bool) -> Scan:
        config = self._config
        by_hand = config.file_system_poll_wait_seconds <= 0
        # Files changing in a version that may be loaded are seen by events while they are
        # watched, and by every poll otherwise: full polls then spare a walk per servable.
        watched = config.watch_filesystem_events and self._loop is not None and not by_hand
        last = () if watched and full else self._emitted(servable.servable_name)
        now = self._clock.now()
        return scan_base_path(servable, config, self._settling, last, now, by_hand=by_hand)

    def _on_connected(self) -> None:
        super()._on_connected()
        self._sync_watches()

    def _config_changed(
        self,
        old: FileSystemStoragePathSourceConfig,
        new: FileSystemStoragePathSourceConfig,
        changed: Sequence[ServableToMonitor],
    ) -> None:
        # Only what changed: a reload costs no stat() per unchanged servable.
        gone = {s.base_path for s in old.servables} - {s.base_path for s in new.servables}
        self._sync_watches(
            add={os.path.abspath(s.base_path) for s in changed},
            remove={os.path.abspath(path) for path in gone},
        )

    # -- settle windows -------------------------------------------------------

    def _schedule_recheck(self, due: Mapping[str, float]) -> None:
        """Polls ``due``'s servables again when their settle windows end (clock times)."""
        if not self._config.file_system_poll_wait_seconds > 0:
            return  # polled by hand: the caller polls again
        with self._lock:
            self._settle_due.update(due)
            self._arm_settle_timer_locked()

    def _arm_settle_timer_locked(self) -> None:
        if self._stop.is_set() or not self._settle_due:
            return
        when = min(self._settle_due.values())
        current = self._settle_timer
        if current is not None and current[0] <= when:
            return
        if current is not None:
            current[1].cancel()
        delay = max(0.0, when - self._clock.now())
        self._settle_timer = (when, self._clock.call_later(delay, self._settle_window_ended))

    def _settle_window_ended(self) -> None:
        with self._lock:
            self._settle_timer = None
            now = self._clock.now() + _CLOCK_SLACK_S
            ended = {name for name, at in self._settle_due.items() if at <= now}
            for name in ended:
                del self._settle_due[name]
            self._dirty |= ended
            self._arm_settle_timer_locked()
        self._wake()

    # -- filesystem events ----------------------------------------------------

    def _sync_watches(self, *, add: set[str] | None = None, remove: set[str] | None = None) -> None:
        """Watches every base path (or, given ``add``/``remove``, changes just those)."""
        config = self._config
        if not (
            config.watch_filesystem_events
            and config.file_system_poll_wait_seconds > 0
            and self._loop is not None
            and not self._stop.is_set()
        ):
            return
        # Recursive: a version's own files tell when it is complete and quiet.
        if add is None and remove is None:
            paths = {os.path.abspath(s.base_path) for s in config.servables}
            self._events.watch_exactly(paths, recursive=True)
        else:
            self._events.watch_changes(add or set(), remove or set(), recursive=True)

    def _on_fs_event(self, path: str) -> None:
        # The base path itself, or anything under it: its ancestors, looked up (not a scan of
        # every servable per event).
        by_base = self._names_by_base()
        names: set[str] = set()
        while True:
            names |= by_base.get(path, frozenset())
            parent = os.path.dirname(path)
            if parent == path:
                break
            path = parent
        if names:
            self._mark_dirty(names)

    def _names_by_base(self) -> Mapping[str, frozenset[str]]:
        """The servables' names by absolute base path, made once per config."""
        config = self._config
        cached = self._by_base
        if cached is None or cached[0] is not config:
            by_base: dict[str, set[str]] = {}
            for s in config.servables:
                by_base.setdefault(os.path.abspath(s.base_path), set()).add(s.servable_name)
            cached = (config, {base: frozenset(names) for base, names in by_base.items()})
            self._by_base = cached
        return cached[1]
