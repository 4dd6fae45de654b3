"""WatchdogWatches: directory watches through watchdog, where inotify is not available."""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, final

if TYPE_CHECKING:
    from watchdog.events import FileSystemEvent, FileSystemEventHandler
    from watchdog.observers.api import BaseObserver, ObservedWatch


@final
class WatchdogWatches:
    """Watches directories with one watchdog observer (which runs a thread per watch: on
    Linux, :class:`InotifyWatches` serves instead).

    Same contract as :class:`InotifyWatches`; watchdog is imported when the
    first directory is watched.
    Thread-safe.
    """

    def __init__(self, on_change: Callable[[str], None], *, include_modifications: bool) -> None:
        self._on_change = on_change
        self._include_modifications = include_modifications
        self._lock = threading.Lock()
        self._observer: BaseObserver | None = None  # guarded by: _lock
        self._watches: dict[str, ObservedWatch] = {}  # guarded by: _lock
        self._closed = False  # guarded by: _lock

    def watch(self, root: str, *, recursive: bool, on_lost: Callable[[], None]) -> None:
        """Watches the directory ``root`` (see InotifyWatches.watch)."""
        with self._lock:
            if self._closed:
                return
            observer = self._observer_locked()
            handler = _handler_class()(root, self._on_change, on_lost)
            self._watches[root] = observer.schedule(
                handler,
                root,
                recursive=recursive,
                event_filter=_event_filter(self._include_modifications),
            )

    def unwatch(self, root: str) -> None:
        """Stops watching ``root``; a root not watched is ignored."""
        with self._lock:
            watch = self._watches.pop(root, None)
            if watch is not None and self._observer is not None:
                # KeyError/OSError: the directory went away, and its watch with it.
                with contextlib.suppress(KeyError, OSError):
                    self._observer.unschedule(watch)

    def close(self) -> None:
        """Stops watching; idempotent."""
        with self._lock:
            self._closed = True
            observer, self._observer = self._observer, None
            self._watches.clear()
        if observer is not None:
            observer.stop()
            observer.join(timeout=5)

    def _observer_locked(self) -> BaseObserver:
        if self._observer is None:
            from watchdog.observers import Observer

            observer = Observer()
            observer.daemon = True
            observer.start()
            self._observer = observer
        return self._observer


@functools.cache
def _handler_class() -> Callable[..., FileSystemEventHandler]:
    """The handler class, made once (watchdog is imported lazily; a class per watch is slow).

    It passes each event's paths to ``on_change``; a deletion or move of the
    root itself also calls ``on_lost``: the watch died with the directory.
    """
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
