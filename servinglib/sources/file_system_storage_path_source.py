"""FileSystemStoragePathSource: aspires the version directories found under base paths."""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any, final

import attrs

from servinglib.core.clock import Clock, SystemClock, Timer
from servinglib.core.event_bus import EventBus
from servinglib.core.servable_data import ServableData
from servinglib.core.servable_id import ServableId, check_name
from servinglib.core.wake_loop import WakeLoop
from servinglib.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ServingError,
    UnavailableError,
)
from servinglib.sources._version_settling import VersionSettling
from servinglib.sources.fs_event_trigger import FsEventTrigger
from servinglib.sources.remote_base_paths import RemoteBasePaths
from servinglib.sources.remote_mirror import StoreEvent
from servinglib.sources.remote_store import is_remote
from servinglib.sources.source import Source, StoragePath
from servinglib.sources.version_check import VersionCheck
from servinglib.sources.version_policy import ServableVersionPolicy

_log = logging.getLogger(__name__)

_VERSION_NAME = re.compile(r"[0-9]+")

BARE_MODEL_VERSION = 0
"""The version of a model put in the base path itself, without numbered version directories.

0 sorts below every version a publisher numbers (from 1, as TF Serving's
examples do), so the first numbered version published replaces it by the
usual swap.
"""
_CLOCK_SLACK_S = 1e-3  # a timer may fire a hair before the clock says its time came


@final
@attrs.frozen(cache_hash=True)  # hashed at every config diff
class ServableToMonitor:
    """A servable whose versions are the numbered directories under ``base_path``.

    ``version_check``: what a complete version directory holds (its
    platform's check, see :class:`~servinglib.sources.VersionCheck`); None:
    any directory is complete.  ``storage_options``: for a remote base path,
    what its fsspec file system is made with (credentials, endpoint, ...; see
    the remote-storage guide); None: the store's defaults and environment.
    Immutable, so thread-safe (``storage_options`` is not copied: do not
    change it).
    """

    servable_name: str = attrs.field(validator=check_name)
    base_path: str
    version_policy: ServableVersionPolicy = attrs.field(factory=ServableVersionPolicy.latest)
    version_check: VersionCheck | None = None
    storage_options: Mapping[str, Any] | None = attrs.field(default=None, hash=False)


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
    ``settle_window_s``: with periodic polling, a version directory is
    aspired only once it is complete (its ``version_check``) and no file
    under it changed for this long (0: as soon as it is complete); polling
    by hand, the caller says when.  ``version_done_marker``: if set, a
    version directory is aspired only once this file exists in it (no settle
    window then: the writer said it is done).
    ``watch_filesystem_events``: with periodic polling, also poll a servable
    the moment something under its base path is created, written, moved or
    deleted (watchdog); polling stays the source of truth.
    ``model_cache_dir``: where versions of remote base paths (``s3://``,
    ``gs://``, ``az://``) are downloaded (None: ``servinglib-model-cache``
    under the system temp directory); ``download_concurrency``: files
    downloaded at once within a version (see :class:`RemoteMirror`).
    Immutable, so thread-safe.
    """

    servables: tuple[ServableToMonitor, ...] = attrs.field(
        default=(), converter=_to_tuple, validator=_unique_names
    )
    file_system_poll_wait_seconds: float = 1.0
    servable_versions_always_present: bool = False
    version_done_marker: str | None = None
    watch_filesystem_events: bool = True
    settle_window_s: float = attrs.field(default=0.5, validator=attrs.validators.ge(0))
    model_cache_dir: str | None = None
    download_concurrency: int = attrs.field(default=8, validator=attrs.validators.ge(1))


@final
class FileSystemStoragePathSource(Source[StoragePath]):
    """Polls base paths for version directories and aspires those the version policy picks.

    A version directory is a child of the base path whose name is a
    non-negative integer (``00012`` is version 12); other children (say
    ``12.tmp`` while being copied, then renamed to ``12``) are ignored.  A
    base path with no version directory that itself passes the servable's
    ``version_check`` (a SavedModel or ``model.py`` put there directly, as
    KServe's storage initializer leaves a bare model in ``/mnt/models``) is
    :data:`BARE_MODEL_VERSION`, 0, while no numbered directory exists.  A
    version counts once it is complete and quiet (see the config's
    ``settle_window_s``); its policy picks among those, so a version still
    being copied never displaces the one serving.  Each poll emits, per
    servable, the complete set of versions its policy picks; a version whose
    files changed and settled again is emitted with the next revision, so
    a failed load is tried again.  Conditions (a missing base path, no
    versions) are logged when they begin and when they end.
    A base path that is missing, unreadable or not a directory keeps the
    previous set (nothing is unloaded) and is reported by
    :meth:`servable_errors` and the log; it never stops the other servables
    or the polling thread.
    ``in_use``: the versions of a servable still loading, serving or
    unloading downstream (say, those a manager holds that have not ended);
    the local copy of a remote version is kept while its version is in use,
    and removed at the first poll after.  None: nothing is known
    downstream, a copy goes as soon as the policy drops its version.  It is
    called on the polling thread, under the source's poll lock: it must not
    call back into this source.
    Thread-safe.
    """

    def __init__(
        self,
        config: FileSystemStoragePathSourceConfig,
        *,
        clock: Clock | None = None,
        in_use: Callable[[str], Collection[int]] | None = None,
    ) -> None:
        super().__init__()
        self._clock = clock if clock is not None else SystemClock()
        self._in_use: Callable[[str], Collection[int]] = in_use or (lambda _name: ())
        self._lock = threading.Lock()
        self._config = config  # guarded by: _lock
        self._errors: dict[str, ServingError] = {}  # guarded by: _lock
        self._last: dict[str, tuple[ServableData[StoragePath], ...]] = {}  # guarded by: _lock
        self._waiting: set[str] = set()  # guarded by: _lock
        self._dirty: set[str] = set()  # guarded by: _lock
        self._full_poll_due = False  # guarded by: _lock
        self._timer: Timer | None = None  # guarded by: _lock
        # One timer for the whole source: the earliest end of a settle window.
        self._settle_timer: tuple[float, Timer] | None = None  # guarded by: _lock
        self._settle_due: dict[str, float] = {}  # guarded by: _lock
        self._poll_lock = threading.Lock()  # serializes polls
        self._settling = VersionSettling(config.settle_window_s)  # guarded by: _poll_lock
        self._conditions: dict[str, str] = {}  # guarded by: _poll_lock
        self._stop = threading.Event()
        self._loop: WakeLoop | None = None
        self._events = FsEventTrigger(self._on_fs_event)
        self._looked = EventBus[str]()
        self._remote = RemoteBasePaths(  # guarded by: _poll_lock
            config.model_cache_dir,
            download_concurrency=config.download_concurrency,
            done_marker=config.version_done_marker,
        )

    @property
    def config(self) -> FileSystemStoragePathSourceConfig:
        """The current configuration."""
        return self._config

    @property
    def polling(self) -> bool:
        """True while the polling thread runs."""
        return self._loop is not None and self._loop.running

    def servable_errors(self) -> dict[str, ServingError]:
        """Servables whose last poll failed, by name, with why.

        A base path that is missing, not a directory or unreadable; with
        ``servable_versions_always_present``, also one without versions.
        (Without it an empty base path is not an error: it unloads the servable.)
        """
        with self._lock:
            return dict(self._errors)

    @property
    def looked_at(self) -> EventBus[str]:
        """Publishes a servable's name each time its base path was looked at.

        After the event, :meth:`servable_errors` and :meth:`holds_no_version`
        say what that look found: subscribe to wait for a base path to be
        read (a version found, an error, or none there) instead of polling
        them.  Delivered on the polling thread (or the caller of
        :meth:`update_config` / :meth:`poll_now`): keep subscribers quick.
        """
        return self._looked

    @property
    def store_events(self) -> EventBus[StoreEvent]:
        """Publishes what the stores of remote base paths did: downloads and failures.

        Delivered on the polling thread: keep subscribers quick.
        """
        return self._remote.events

    def store_work(self) -> list[str]:
        """What the stores of remote base paths are doing now: each listing and download running,
        with its progress and how long it has taken (for a stop's log)."""
        return self._remote.work.describe()

    def holds_no_version(self, name: str) -> bool:
        """True if ``name``'s base path was read and holds no version to serve, nor one waiting.

        A version directory not yet complete and quiet is waiting: False.
        """
        with self._lock:
            return self._last.get(name) == () and name not in self._waiting

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
            fixed = ("file_system_poll_wait_seconds", "watch_filesystem_events", "settle_window_s")
            if any(getattr(config, field) != getattr(old, field) for field in fixed):
                raise InvalidArgumentError(f"{', '.join(fixed)} cannot change")
            kept = {s.servable_name for s in config.servables}
            removed = [s.servable_name for s in old.servables if s.servable_name not in kept]
            before = set(old.servables)
            changed = [s for s in config.servables if s not in before]
            with self._lock:
                self._config = config
                for name in removed:
                    self._errors.pop(name, None)
                    self._last.pop(name, None)
                    self._waiting.discard(name)
            for name in removed:
                self._conditions.pop(name, None)
                self.emit_aspired_versions(name, [])
                self._remote.forget(name)
            for servable in old.servables:
                if servable.servable_name in removed or servable in changed:
                    self._settling.forget(self._local_base(servable))
            if self._polls() and self._connected():
                self._poll_servables(changed, emit_unchanged=True)
        # Only what changed: a reload costs no stat() per unchanged servable.
        still_used = {s.base_path for s in config.servables}
        gone = {s.base_path for s in old.servables} - still_used
        self._sync_watches(
            add={os.path.abspath(s.base_path) for s in changed if not is_remote(s.base_path)},
            remove={os.path.abspath(path) for path in gone if not is_remote(path)},
        )

    def poll_once(self) -> None:
        """Polls every servable now and emits each one's aspired versions (not after close)."""
        with self._poll_lock:
            if self._stop.is_set():
                return
            self._poll_servables(self._config.servables, emit_unchanged=True)
            self._remote.sweep(self._in_use)
        self._sync_watches()

    def close(self) -> None:
        """Stops polling and watching; idempotent.  Emits nothing more once it returns.

        A listing or download of a remote base path in progress is cancelled
        (and logged, naming it), so closing does not wait for it.
        """
        self._stop.set()
        cancelled = self._remote.work.cancel()
        if cancelled:
            _log.info("Closing the file-system source: cancelled %s", "; ".join(cancelled))
        with self._poll_lock:  # a poll in progress ends; none starts (they check _stop)
            self._remote.close()
        with self._lock:
            timers = [self._timer, self._settle_timer[1] if self._settle_timer else None]
            self._timer = self._settle_timer = None
        for timer in timers:
            if timer is not None:
                timer.cancel()
        if self._loop is not None:
            self._loop.stop()
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
            self._loop = WakeLoop("servinglib-fs-source", self._poll_step, what="file-system poll")
            self._loop.start()
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
            self._wake()

        with self._lock:
            if not self._stop.is_set():
                self._timer = self._clock.call_later(
                    self._config.file_system_poll_wait_seconds, due
                )

    def _poll_step(self) -> None:
        """What the polling thread does when woken: a full poll when due, else the dirty names."""
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
        finally:
            if full:
                self._schedule_full_poll()

    def _wake(self) -> None:
        if self._loop is not None:
            self._loop.wake()

    def _poll_servables(
        self, servables: Iterable[ServableToMonitor], *, emit_unchanged: bool
    ) -> None:
        config = self._config
        by_hand = config.file_system_poll_wait_seconds <= 0
        # Files changing in a version that may be loaded are seen by events while they are
        # watched, and by every poll otherwise: full polls then spare a walk per servable.
        # A remote base path's mirror is never watched: its new copies are seen by polls alone.
        watched = config.watch_filesystem_events and self._loop is not None and not by_hand
        recheck: dict[str, float] = {}
        for servable in servables:
            name = servable.servable_name
            look_at_emitted = not (watched and emit_unchanged) or is_remote(servable.base_path)
            with self._lock:
                last = self._last.get(name, ()) if look_at_emitted else ()
            scan = self._scan(servable, last, by_hand=by_hand)
            if self._stop.is_set():
                return  # closing: the scan's store work may have been cut short
            with self._lock:
                if scan.error is None:
                    self._errors.pop(name, None)
                else:
                    self._errors[name] = scan.error
                if scan.waiting:
                    self._waiting.add(name)
                else:
                    self._waiting.discard(name)
                unchanged = scan.versions is not None and self._last.get(name) == scan.versions
                if scan.versions is not None:
                    self._last[name] = scan.versions
            self._log_condition(name, scan.condition)
            if scan.recheck_at is not None:
                recheck[name] = scan.recheck_at
            if scan.versions is not None and (emit_unchanged or not unchanged):
                self.emit_aspired_versions(name, scan.versions)
            self._looked.publish(name)
        if recheck:
            self._schedule_recheck(recheck)

    def _scan(
        self,
        servable: ServableToMonitor,
        last: tuple[ServableData[StoragePath], ...],
        *,
        by_hand: bool,
    ) -> _Scan:
        """:func:`_scan` of the base path, or of its local mirror when it is remote."""
        config, now = self._config, self._clock.now()
        if not is_remote(servable.base_path):
            return _scan(servable, config, self._settling, last, now, by_hand=by_hand)
        try:
            mirror = self._remote.sync(
                servable.servable_name,
                servable.base_path,
                servable.version_policy,
                servable.storage_options,
                now=now,
                period_s=0.0 if by_hand else config.file_system_poll_wait_seconds,
                in_use=self._in_use(servable.servable_name),
            )
        except ServingError as error:
            return _Scan(None, error, (logging.WARNING, error.message))
        local = mirror.local_base
        scan = _scan(servable, config, self._settling, last, now, by_hand=by_hand, local=local)
        if mirror.refused and scan.versions is not None:
            # Refused versions end in error beside what serves (the manager records each).
            refused = tuple(
                ServableData[StoragePath](ServableId(servable.servable_name, v), error=error)
                for v, error in sorted(mirror.refused.items())
            )
            return attrs.evolve(scan, versions=scan.versions + refused, waiting=False)
        if mirror.pending and not scan.versions:  # listed, not complete yet: keep waiting
            return _Scan(None, waiting=True)
        return scan

    def _local_base(self, servable: ServableToMonitor) -> str:
        """The directory whose version directories are looked at: the mirror's when remote."""
        local = self._remote.local_base(servable.servable_name)
        return local if local is not None else servable.base_path

    def _log_condition(self, name: str, condition: tuple[int, str] | None) -> None:
        """Logs a servable's condition when it begins, changes and ends; not on every poll."""
        before = self._conditions.get(name)
        if condition is None:
            if before is not None:
                del self._conditions[name]
                _log.info("servable %s: resolved: %s", name, before)
            return
        level, message = condition
        if before != message:
            self._conditions[name] = message
            _log.log(level, "%s", message)

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

    # -- filesystem events --------------------------------------------------

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
            paths = {
                os.path.abspath(s.base_path) for s in config.servables if not is_remote(s.base_path)
            }
            self._events.watch_exactly(paths, recursive=True)
        else:
            self._events.watch_changes(add or set(), remove or set(), recursive=True)

    def _on_fs_event(self, path: str) -> None:
        # The base path itself, or anything under it.
        names = {
            s.servable_name
            for s in self._config.servables
            if path == (base := os.path.abspath(s.base_path)) or path.startswith(_prefix(base))
        }
        if names:
            with self._lock:
                self._dirty |= names
            self._wake()


@attrs.frozen
class _Scan:
    """One poll of one servable.

    ``versions``: its aspired versions (None: keep the last ones); ``error``:
    why its base path cannot be used; ``condition``: (log level, message) of
    a lasting problem, logged when it begins; ``recheck_at``: clock time a
    settle window ends; ``waiting``: version directories were found, none of
    them complete and quiet yet.
    """

    versions: tuple[ServableData[StoragePath], ...] | None
    error: ServingError | None = None
    condition: tuple[int, str] | None = None
    recheck_at: float | None = None
    waiting: bool = False


def _scan(
    servable: ServableToMonitor,
    config: FileSystemStoragePathSourceConfig,
    settling: VersionSettling,
    last: tuple[ServableData[StoragePath], ...],
    now: float,
    *,
    by_hand: bool,
    local: str | None = None,
) -> _Scan:
    """Lists the version directories of ``servable`` and picks among the complete, quiet ones.

    ``last``: what was emitted last, whose files are looked at for changes (the
    other versions offered before are ready as they were).  ``local``: the
    local mirror of a remote base path, whose versions arrive whole.
    """
    name, base = servable.servable_name, local or servable.base_path
    try:
        found = _version_dirs(base)
    except OSError as exc:
        settling.forget(base)
        error = _base_path_error(servable, exc)
        return _Scan(None, error, (logging.WARNING, error.message))
    check = servable.version_check
    if not found and check is not None and check(base) is None:
        found = {BARE_MODEL_VERSION: base}  # a model in the base path itself
    settling.forget_others(base, set(found.values()))
    emitted = {item.data for item in last if item.ok}
    ready, recheck_at = _ready_versions(
        servable,
        base,
        found,
        config,
        settling,
        emitted=emitted,
        now=now,
        done=by_hand or local is not None,
    )
    selected = servable.version_policy.select({v: path for v, (path, _) in ready.items()})
    versions = tuple(
        ServableData(ServableId(name, v), data=ready[v][0], revision=ready[v][1]) for v in selected
    )
    if selected:
        return _Scan(versions, recheck_at=recheck_at)
    if found and not ready:  # each waiting version said so once
        # What serves keeps serving until a version is ready (say, the base path moved to
        # files still being written): emitting none would unload it for the wait.
        return _Scan(None, recheck_at=recheck_at, waiting=True)
    message = f"No versions of servable {name} found under base path {base}" + (
        f" (policy {servable.version_policy})" if ready else ""
    )
    if config.servable_versions_always_present:
        error = FailedPreconditionError(
            f"{message}; keeping the versions it serves (servable_versions_always_present)"
        )
        return _Scan(None, error, (logging.WARNING, error.message), recheck_at)
    return _Scan(versions, None, (logging.WARNING, message), recheck_at)


def _ready_versions(
    servable: ServableToMonitor,
    base: str,
    found: Mapping[int, str],
    config: FileSystemStoragePathSourceConfig,
    settling: VersionSettling,
    *,
    emitted: set[str],
    now: float,
    done: bool,
) -> tuple[dict[int, tuple[str, int]], float | None]:
    """Version → (path, revision) of the complete, quiet versions, and when to look again.

    A version offered before but not emitted last time is ready as it was,
    unlooked at: only what may load is fingerprinted.  ``done``: no settle
    window (polled by hand, or a remote version's copy, renamed in whole).
    """
    ready: dict[int, tuple[str, int]] = {}
    rechecks = []
    marker = config.version_done_marker
    offered = settling.offered_revisions(base)
    for version, path in found.items():
        revision = offered.get(path)
        if revision is not None and path not in emitted:
            ready[version] = (path, revision)
            continue
        if marker is not None and not os.path.exists(os.path.join(path, marker)):
            continue
        verdict = settling.look(
            f"Version {version} of servable {servable.servable_name} ({path})",
            path,
            now,
            servable.version_check,
            done=done or marker is not None,
        )
        if verdict.offered:
            ready[version] = (path, verdict.revision)
        if verdict.recheck_at is not None:
            rechecks.append(verdict.recheck_at)
    return ready, min(rechecks, default=None)


def _base_path_error(servable: ServableToMonitor, exc: OSError) -> ServingError:
    name, base = servable.servable_name, servable.base_path
    if isinstance(exc, FileNotFoundError):
        return NotFoundError(f"Could not find base path {base} for servable {name}")
    if isinstance(exc, NotADirectoryError):
        return InvalidArgumentError(f"Base path {base} of servable {name} is not a directory")
    if isinstance(exc, PermissionError):
        return PermissionDeniedError(
            f"Cannot read base path {base} of servable {name}: {exc.strerror}"
        )
    return UnavailableError(f"Cannot list base path {base} of servable {name}: {exc}")


def _prefix(base: str) -> str:
    """What every version directory path under ``base`` starts with."""
    return os.path.join(base, "")


def _version_dirs(base: str) -> Mapping[int, str]:
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
