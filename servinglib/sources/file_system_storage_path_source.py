"""FileSystemStoragePathSource: aspires the version directories found under base paths."""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Iterable, Mapping
from typing import final

import attrs

from servinglib.core.clock import Clock, SystemClock, Timer
from servinglib.core.servable_data import ServableData
from servinglib.core.servable_id import ServableId, check_name
from servinglib.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ServingError,
    UnavailableError,
)
from servinglib.sources.fs_event_trigger import FsEventTrigger
from servinglib.sources.source import Source, StoragePath
from servinglib.sources.version_policy import ServableVersionPolicy

_log = logging.getLogger(__name__)

_VERSION_NAME = re.compile(r"[0-9]+")


@final
@attrs.frozen(cache_hash=True)  # hashed at every config diff
class ServableToMonitor:
    """A servable whose versions are the numbered directories under ``base_path``.

    Immutable, so thread-safe.
    """

    servable_name: str = attrs.field(validator=check_name)
    base_path: str
    version_policy: ServableVersionPolicy = attrs.field(factory=ServableVersionPolicy.latest)


def _to_tuple(servables: Iterable[ServableToMonitor]) -> tuple[ServableToMonitor, ...]:
    return tuple(servables)


def _unique_names(
    _instance: object, _attribute: object, servables: tuple[ServableToMonitor, ...]
) -> None:
    seen: set[str] = set()
    for servable in servables:
        if servable.servable_name in seen:
            raise InvalidArgumentError(f"Servable {servable.servable_name} is listed twice")
        seen.add(servable.servable_name)


@final
@attrs.frozen
class FileSystemStoragePathSourceConfig:
    """What a FileSystemStoragePathSource watches, and how.

    ``file_system_poll_wait_seconds``: poll period; 0 polls once when
    connected, a negative value never polls by itself (call ``poll_once``).
    ``servable_versions_always_present``: an empty or unreadable base path
    never unloads what serves (the problem is reported instead).
    ``version_done_marker``: if set, a version directory is aspired only once
    this file exists in it (for writers that cannot rename into place).
    ``watch_filesystem_events``: with periodic polling, also poll a servable
    the moment its base path changes (watchdog); polling stays the source of
    truth.  Immutable, so thread-safe.
    """

    servables: tuple[ServableToMonitor, ...] = attrs.field(
        default=(), converter=_to_tuple, validator=_unique_names
    )
    file_system_poll_wait_seconds: float = 1.0
    servable_versions_always_present: bool = False
    version_done_marker: str | None = None
    watch_filesystem_events: bool = True


@final
class FileSystemStoragePathSource(Source[StoragePath]):
    """Polls base paths for version directories and aspires those the version policy picks.

    A version directory is a child of the base path whose name is a
    non-negative integer (``00012`` is version 12); other children (say
    ``12.tmp`` while being copied, then renamed to ``12``) are ignored.  Each
    poll emits, per servable, the complete set of versions its policy picks.
    A base path that is missing, unreadable or not a directory keeps the
    previous set (nothing is unloaded) and is reported by
    :meth:`servable_errors` and the log; it never stops the other servables
    or the polling thread.
    Thread-safe.
    """

    def __init__(
        self, config: FileSystemStoragePathSourceConfig, *, clock: Clock | None = None
    ) -> None:
        super().__init__()
        self._clock = clock if clock is not None else SystemClock()
        self._lock = threading.Lock()
        self._config = config  # guarded by: _lock
        self._errors: dict[str, ServingError] = {}  # guarded by: _lock
        self._last: dict[str, tuple[ServableData[StoragePath], ...]] = {}  # guarded by: _lock
        self._dirty: set[str] = set()  # guarded by: _lock
        self._full_poll_due = False  # guarded by: _lock
        self._timer: Timer | None = None  # guarded by: _lock
        self._poll_lock = threading.Lock()  # serializes polls
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._events = FsEventTrigger(self._on_fs_event)

    @property
    def config(self) -> FileSystemStoragePathSourceConfig:
        """The current configuration."""
        return self._config

    @property
    def polling(self) -> bool:
        """True while the polling thread runs."""
        return self._thread is not None and self._thread.is_alive()

    def servable_errors(self) -> dict[str, ServingError]:
        """Servables whose last poll failed, by name, with why.

        A base path that is missing, not a directory or unreadable; with
        ``servable_versions_always_present``, also one without versions.
        (Without it an empty base path is not an error: it unloads the servable.)
        """
        with self._lock:
            return dict(self._errors)

    def emitted_versions(self, name: str) -> tuple[ServableData[StoragePath], ...] | None:
        """The aspired versions last emitted for ``name``; None before its first good poll.

        ``()``: its base path was read and holds no version to serve.
        """
        with self._lock:
            return self._last.get(name)

    def update_config(self, config: FileSystemStoragePathSourceConfig) -> None:
        """Replaces what is monitored: removed servables get an empty aspired set (unload).

        New and changed servables are polled before this returns (when the
        source is connected and polls).  Raises InvalidArgumentError if the
        poll period or event watching changes (fixed at construction).
        """
        with self._poll_lock:
            if self._stop.is_set():
                return
            old = self._config
            if (config.file_system_poll_wait_seconds, config.watch_filesystem_events) != (
                old.file_system_poll_wait_seconds,
                old.watch_filesystem_events,
            ):
                raise InvalidArgumentError(
                    "file_system_poll_wait_seconds and watch_filesystem_events cannot change"
                )
            kept = {s.servable_name for s in config.servables}
            removed = [s.servable_name for s in old.servables if s.servable_name not in kept]
            before = set(old.servables)
            changed = [s for s in config.servables if s not in before]
            with self._lock:
                self._config = config
                for name in removed:
                    self._errors.pop(name, None)
                    self._last.pop(name, None)
            for name in removed:
                self.emit_aspired_versions(name, [])
            if self._polls() and self._connected():
                self._poll_servables(changed, emit_unchanged=True)
        # Only what changed: a reload costs no stat() per unchanged servable.
        still_used = {s.base_path for s in config.servables}
        gone = {s.base_path for s in old.servables} - still_used
        self._sync_watches(
            add={os.path.abspath(s.base_path) for s in changed},
            remove={os.path.abspath(path) for path in gone},
        )

    def poll_once(self) -> None:
        """Polls every servable now and emits each one's aspired versions (not after close)."""
        with self._poll_lock:
            if self._stop.is_set():
                return
            self._poll_servables(self._config.servables, emit_unchanged=True)
        self._sync_watches()

    def close(self) -> None:
        """Stops polling and watching; idempotent.  Emits nothing more once it returns."""
        with self._poll_lock:
            self._stop.set()
        self._wake.set()
        with self._lock:
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        if self._thread is not None:
            self._thread.join()
        self._events.close()

    def __enter__(self) -> FileSystemStoragePathSource:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- polling ------------------------------------------------------------

    def _on_connected(self) -> None:
        if not self._polls():
            return
        try:
            self.poll_once()
        except Exception:  # noqa: BLE001 - a failing target must not stop the polling
            _log.exception("the first file-system poll failed; polling goes on")
        if self._config.file_system_poll_wait_seconds > 0:
            self._thread = threading.Thread(
                target=self._poll_loop, name="servinglib-fs-source", daemon=True
            )
            self._thread.start()
            self._schedule_full_poll()
            self._sync_watches()

    def _polls(self) -> bool:
        return self._config.file_system_poll_wait_seconds >= 0

    def _connected(self) -> bool:
        with self._emit_lock:
            return self._callback is not None

    def _schedule_full_poll(self) -> None:
        def due() -> None:
            with self._lock:
                self._full_poll_due = True
            self._wake.set()

        with self._lock:
            if not self._stop.is_set():
                self._timer = self._clock.call_later(
                    self._config.file_system_poll_wait_seconds, due
                )

    def _poll_loop(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._stop.is_set():
                return
            with self._lock:
                full, self._full_poll_due = self._full_poll_due, False
                dirty, self._dirty = self._dirty, set()
            try:
                if full:
                    self.poll_once()
                elif dirty:
                    with self._poll_lock:  # the config cannot change between choice and poll
                        if self._stop.is_set():
                            return
                        servables = [s for s in self._config.servables if s.servable_name in dirty]
                        self._poll_servables(servables, emit_unchanged=False)
            except Exception:  # noqa: BLE001 - the polling thread must never die
                _log.exception("file-system poll failed; polling goes on")
            if full:
                self._schedule_full_poll()

    def _poll_servables(
        self, servables: Iterable[ServableToMonitor], *, emit_unchanged: bool
    ) -> None:
        config = self._config
        for servable in servables:
            versions, error = _list_versions(servable, config)
            name = servable.servable_name
            with self._lock:
                if error is None:
                    self._errors.pop(name, None)
                else:
                    self._errors[name] = error
                unchanged = versions is not None and self._last.get(name) == tuple(versions)
                if versions is not None:
                    self._last[name] = tuple(versions)
            if error is not None:
                _log.warning("%s", error.message)
            if versions is not None and (emit_unchanged or not unchanged):
                self.emit_aspired_versions(name, versions)

    # -- filesystem events --------------------------------------------------

    def _sync_watches(self, *, add: set[str] | None = None, remove: set[str] | None = None) -> None:
        """Watches every base path (or, given ``add``/``remove``, changes just those)."""
        config = self._config
        if not (
            config.watch_filesystem_events
            and config.file_system_poll_wait_seconds > 0
            and self._thread is not None
            and not self._stop.is_set()
        ):
            return
        recursive = config.version_done_marker is not None
        if add is None and remove is None:
            paths = {os.path.abspath(s.base_path) for s in config.servables}
            self._events.watch_exactly(paths, recursive=recursive)
        else:
            self._events.watch_changes(add or set(), remove or set(), recursive=recursive)

    def _on_fs_event(self, path: str) -> None:
        # The base path itself, a version directory, or a file in one (the marker).
        candidates = {path, os.path.dirname(path), os.path.dirname(os.path.dirname(path))}
        names = {
            s.servable_name
            for s in self._config.servables
            if os.path.abspath(s.base_path) in candidates
        }
        if names:
            with self._lock:
                self._dirty |= names
            self._wake.set()


def _list_versions(
    servable: ServableToMonitor, config: FileSystemStoragePathSourceConfig
) -> tuple[list[ServableData[StoragePath]] | None, ServingError | None]:
    """The aspired versions of one servable, or None (keep the last ones) and why."""
    name, base = servable.servable_name, servable.base_path
    try:
        found = _version_dirs(base, config.version_done_marker)
    except FileNotFoundError:
        return None, NotFoundError(f"Could not find base path {base} for servable {name}")
    except NotADirectoryError:
        return None, InvalidArgumentError(f"Base path {base} of servable {name} is not a directory")
    except PermissionError as exc:
        return None, PermissionDeniedError(
            f"Cannot read base path {base} of servable {name}: {exc.strerror}"
        )
    except OSError as exc:
        return None, UnavailableError(f"Cannot list base path {base} of servable {name}: {exc}")
    selected = servable.version_policy.select(found)
    if not selected:
        message = f"No versions of servable {name} found under base path {base}" + (
            f" (policy {servable.version_policy})" if found else ""
        )
        if config.servable_versions_always_present:
            return None, FailedPreconditionError(
                f"{message}; keeping the versions it serves (servable_versions_always_present)"
            )
        _log.warning("%s", message)
    return [ServableData.of(ServableId(name, v), found[v]) for v in selected], None


def _version_dirs(base: str, done_marker: str | None) -> Mapping[int, str]:
    """Version number → directory for the numbered subdirectories of ``base``."""
    found: dict[int, str] = {}
    with os.scandir(base) as entries:
        for entry in entries:
            if not _VERSION_NAME.fullmatch(entry.name):
                continue
            try:
                if not entry.is_dir():  # follows symlinks; a dangling one is not a dir
                    _log.debug("ignoring %s: not a directory", entry.path)
                    continue
            except OSError:
                continue
            if done_marker is not None and not os.path.exists(
                os.path.join(entry.path, done_marker)
            ):
                continue
            version = int(entry.name)
            if version in found:
                _log.warning(
                    "%s and %s both name version %d; using %s",
                    found[version],
                    entry.path,
                    version,
                    min(found[version], entry.path),
                )
                found[version] = min(found[version], entry.path)
                continue
            found[version] = entry.path
    return found
