"""FsEventTrigger: wakes a poll when something changes on disk (watchdog)."""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import stat
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

    def __init__(
        self, on_change: Callable[[str], None], *, include_modifications: bool = False
    ) -> None:
        self._on_change = on_change
        self._include_modifications = include_modifications
        self._lock = threading.Lock()
        self._observer: BaseObserver | None = None  # guarded by: _lock
        # (path, recursive) → the watch and the (device, inode) of the directory it watches
        self._watches: dict[
            tuple[str, bool], tuple[ObservedWatch, tuple[int, int]]
        ] = {}  # guarded by: _lock
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
                for key, (_, inode) in self._watches.items()
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
                if current is not None and (current[1] != inode or key in self._lost):
                    self._unschedule_locked(key)
                    self._lost.discard(key)
                    current = None
                if current is None and inode is not None:
                    self._schedule_locked(key, inode)

    def close(self) -> None:
        """Stops watching; idempotent."""
        with self._lock:
            self._closed = True
            observer, self._observer = self._observer, None
            self._watches.clear()
        if observer is not None:
            observer.stop()
            observer.join(timeout=5)

    def _schedule_locked(self, key: tuple[str, bool], inode: tuple[int, int]) -> None:
        path, recursive = key
        try:
            observer = self._observer_locked()
            handler = _make_handler(path, self._on_change, lambda: self._mark_lost(key))
            watch = observer.schedule(
                handler,
                path,
                recursive=recursive,
                event_filter=_event_filter(self._include_modifications),
            )
            self._watches[key] = (watch, inode)
        except OSError as exc:  # e.g. out of inotify watches: polling still covers it
            _log.warning("cannot watch %s for changes (polling still picks them up): %s", path, exc)

    def _mark_lost(self, key: tuple[str, bool]) -> None:
        """The watched directory itself went away: watch it afresh next time."""
        with self._lock:
            self._lost.add(key)

    def _unschedule_locked(self, key: tuple[str, bool]) -> None:
        watch, _ = self._watches.pop(key)
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


def _inode(path: str) -> tuple[int, int] | None:
    """(device, inode) of the directory at ``path``, or None if there is none."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return (found.st_dev, found.st_ino) if stat.S_ISDIR(found.st_mode) else None


def _make_handler(
    root: str, on_change: Callable[[str], None], on_lost: Callable[[], None]
) -> FileSystemEventHandler:
    """A watchdog handler passing each event's paths to ``on_change``.

    A deletion or move of ``root`` itself also calls ``on_lost``: the watch
    died with the directory (and a new directory may even get its inode).
    """
    handler: FileSystemEventHandler = _handler_class()(root, on_change, on_lost)
    return handler


@functools.cache
def _handler_class() -> Callable[..., FileSystemEventHandler]:
    """The handler class, made once (watchdog is imported lazily; a class per watch is slow)."""
    from watchdog.events import FileSystemEventHandler

    class Handler(FileSystemEventHandler):
        def __init__(
            self, root: str, on_change: Callable[[str], None], on_lost: Callable[[], None]
        ) -> None:
            self._root, self._on_change, self._on_lost = root, on_change, on_lost

        def on_any_event(self, event: FileSystemEvent) -> None:
            source = os.fsdecode(event.src_path)
            if source == self._root and event.event_type in ("deleted", "moved"):
                self._on_lost()
            for path in (source, os.fsdecode(event.dest_path)):
                if path:
                    self._on_change(path)

    return Handler


def _event_filter(include_modifications: bool) -> list[type[FileSystemEvent]]:
    """The events worth a look: entries appearing, disappearing, renamed, or closed after writing.

    Leaving out open/read-only close/modify/attrib events spares watchdog
    decoding the events each poll's own directory listing causes (~6x the
    poll's cost), and a copy's every write; ``include_modifications`` adds
    writes (for a watched file edited in place).
    """
    from watchdog import events

    return [
        events.DirCreatedEvent,
        events.FileCreatedEvent,
        events.DirDeletedEvent,
        events.FileDeletedEvent,
        events.DirMovedEvent,
        events.FileMovedEvent,
        events.FileClosedEvent,
        *((events.FileModifiedEvent,) if include_modifications else ()),
    ]
