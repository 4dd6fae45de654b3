"""FsEventTrigger: wakes a poll when something changes on disk (inotify, else watchdog)."""

from __future__ import annotations

import functools
import logging
import os
import stat
import threading
from collections.abc import Callable, Iterable
from typing import Protocol, final

_log = logging.getLogger(__name__)


class _Watches(Protocol):
    """What watches directories for a trigger (InotifyWatches, WatchdogWatches)."""

    def watch(self, root: str, *, recursive: bool, on_lost: Callable[[], None]) -> None: ...

    def unwatch(self, root: str) -> None: ...

    def close(self) -> None: ...


@final
class FsEventTrigger:
    """Watches directories and calls ``on_change(path)`` for each event under them.

    Only a trigger: events may be lost or unsupported (network filesystems),
    so callers keep polling as the source of truth.  On Linux every
    directory is watched on one inotify descriptor read by one thread, however
    many are watched; elsewhere watchdog (imported when the first directory
    is watched) runs a thread per watched directory.
    Thread-safe; ``on_change`` runs on the watching thread and must be quick.
    """

    def __init__(
        self, on_change: Callable[[str], None], *, include_modifications: bool = False
    ) -> None:
        self._on_change = on_change
        self._include_modifications = include_modifications
        self._lock = threading.Lock()
        self._watcher: _Watches | None = None  # guarded by: _lock
        # (path, recursive) → the (device, inode) of the directory watched
        self._watches: dict[tuple[str, bool], tuple[int, int]] = {}  # guarded by: _lock
        self._lost: set[tuple[str, bool]] = set()  # guarded by: _lock
        self._closed = False  # guarded by: _lock

    def watch_exactly(self, paths: Iterable[str], *, recursive: bool) -> None:
        """Watches the existing directories among ``paths`` and stops watching the others.

        A directory deleted and created again since it was watched (its inode
        changed, and its old watch died with it) is watched afresh.
        """
        wanted = {(p, recursive): inode for p in paths if (inode := _inode(p)) is not None}
        with self._lock:
            if self._closed:
                return
            stale = [
                key
                for key, inode in self._watches.items()
                if wanted.get(key) != inode or key in self._lost
            ]
            for key in stale:
                self._unschedule_locked(key)
            self._lost.clear()
            for key in wanted.keys() - self._watches.keys():
                self._schedule_locked(key, wanted[key])

    def watch_changes(self, add: Iterable[str], remove: Iterable[str], *, recursive: bool) -> None:
        """Starts watching the existing directories of ``add``, stops watching ``remove``.

        Touches only those paths (no stat() of the others): for config updates.
        """
        with self._lock:
            if self._closed:
                return
            for path in remove:
                if (path, recursive) in self._watches:
                    self._unschedule_locked((path, recursive))
            for path in add:
                key = (path, recursive)
                inode = _inode(path)
                current = self._watches.get(key)
                if current is not None and (current != inode or key in self._lost):
                    self._unschedule_locked(key)
                    self._lost.discard(key)
                    current = None
                if current is None and inode is not None:
                    self._schedule_locked(key, inode)

    def close(self) -> None:
        """Stops watching; idempotent."""
        with self._lock:
            self._closed = True
            watcher, self._watcher = self._watcher, None
            self._watches.clear()
        if watcher is not None:
            watcher.close()

    def _schedule_locked(self, key: tuple[str, bool], inode: tuple[int, int]) -> None:
        path, recursive = key
        try:
            watcher = self._watcher_locked()
            watcher.watch(path, recursive=recursive, on_lost=lambda: self._mark_lost(key))
            self._watches[key] = inode
        except OSError as exc:  # e.g. out of inotify watches: polling still covers it
            _log.warning("cannot watch %s for changes (polling still picks them up): %s", path, exc)

    def _mark_lost(self, key: tuple[str, bool]) -> None:
        """The watched directory itself went away: watch it afresh next time."""
        with self._lock:
            self._lost.add(key)

    def _unschedule_locked(self, key: tuple[str, bool]) -> None:
        del self._watches[key]
        if self._watcher is not None:
            self._watcher.unwatch(key[0])

    def _watcher_locked(self) -> _Watches:
        if self._watcher is None:
            self._watcher = _watches_class()(
                self._on_change, include_modifications=self._include_modifications
            )
        return self._watcher


@functools.cache
def _watches_class() -> Callable[..., _Watches]:
    """InotifyWatches where inotify is available, else WatchdogWatches."""
    from servinglib.sources import _inotify_watches

    if _inotify_watches.available():
        return _inotify_watches.InotifyWatches
    from servinglib.sources._watchdog_watches import WatchdogWatches

    return WatchdogWatches


def _inode(path: str) -> tuple[int, int] | None:
    """(device, inode) of the directory at ``path``, or None if there is none."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return (found.st_dev, found.st_ino) if stat.S_ISDIR(found.st_mode) else None
