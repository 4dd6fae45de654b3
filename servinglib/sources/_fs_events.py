"""Filesystem event trigger (watchdog): wakes a poll when something changes on disk."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, final

if TYPE_CHECKING:
    from watchdog.events import FileSystemEvent, FileSystemEventHandler
    from watchdog.observers.api import BaseObserver, ObservedWatch

_log = logging.getLogger(__name__)


@final
class FsEventTrigger:
    """Watches directories and calls ``on_change(path)`` for each event under them.

    Only a trigger: events may be lost or unsupported (network filesystems),
    so callers keep polling as the source of truth.  watchdog is imported
    when the first directory is watched.
    Thread-safe; ``on_change`` runs on watchdog's thread and must be quick.
    """

    def __init__(self, on_change: Callable[[str], None]) -> None:
        self._on_change = on_change
        self._lock = threading.Lock()
        self._observer: BaseObserver | None = None  # guarded by: _lock
        self._watches: dict[tuple[str, bool], ObservedWatch] = {}  # guarded by: _lock
        self._closed = False  # guarded by: _lock

    def watch_exactly(self, paths: Iterable[str], *, recursive: bool) -> None:
        """Watches the existing directories among ``paths`` and stops watching the others."""
        wanted = {(p, recursive) for p in paths if os.path.isdir(p)}
        with self._lock:
            if self._closed:
                return
            for key in [k for k in self._watches if k not in wanted]:
                self._unschedule_locked(key)
            for key in wanted - self._watches.keys():
                self._schedule_locked(key)

    def close(self) -> None:
        """Stops watching; idempotent."""
        with self._lock:
            self._closed = True
            observer, self._observer = self._observer, None
            self._watches.clear()
        if observer is not None:
            observer.stop()
            observer.join(timeout=5)

    def _schedule_locked(self, key: tuple[str, bool]) -> None:
        path, recursive = key
        try:
            observer = self._observer_locked()
            handler = _make_handler(self._on_change)
            self._watches[key] = observer.schedule(handler, path, recursive=recursive)
        except OSError as exc:  # e.g. out of inotify watches: polling still covers it
            _log.warning("cannot watch %s for changes (polling still picks them up): %s", path, exc)

    def _unschedule_locked(self, key: tuple[str, bool]) -> None:
        watch = self._watches.pop(key)
        if self._observer is not None:
            # KeyError/OSError: the directory went away, and its watch with it.
            with contextlib.suppress(KeyError, OSError):
                self._observer.unschedule(watch)

    def _observer_locked(self) -> BaseObserver:
        if self._observer is None:
            from watchdog.observers import Observer

            observer = Observer()
            observer.daemon = True
            observer.start()
            self._observer = observer
        return self._observer


def _make_handler(on_change: Callable[[str], None]) -> FileSystemEventHandler:
    """A watchdog handler passing each event's paths to ``on_change``."""
    from watchdog.events import FileSystemEventHandler

    class Handler(FileSystemEventHandler):
        def on_any_event(self, event: FileSystemEvent) -> None:
            for path in (event.src_path, event.dest_path):
                if path:
                    on_change(os.fsdecode(path))

    return Handler()
