"""BasePathPolling: what the storage path sources share: config, polls, storage conditions."""

from __future__ import annotations

import abc
import logging
import threading
import time
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Self

from servinglib.core.clock import Clock, SystemClock, Timer
from servinglib.core.event_bus import EventBus
from servinglib.core.servable_data import ServableData
from servinglib.core.storage_condition import StorageCondition
from servinglib.core.wake_loop import WakeLoop
from servinglib.errors import InvalidArgumentError, ServingError
from servinglib.sources._version_settling import VersionSettling
from servinglib.sources.base_path_scan import Scan
from servinglib.sources.source import Source, StoragePath
from servinglib.sources.storage_path_source_config import (
    FileSystemStoragePathSourceConfig,
    ServableToMonitor,
)

_log = logging.getLogger("servinglib.sources.file_system_storage_path_source")

# Full polls take at most this share of a core: one that took longer than this share of the
# period is followed by a longer pause (a config of 10,000 base paths: a poll is ~0.3 s of CPU).
_MAX_POLL_CPU_SHARE = 0.1
_FIXED = ("file_system_poll_wait_seconds", "watch_filesystem_events", "settle_window_s")


class BasePathPolling(Source[StoragePath], abc.ABC):
    """Polls the base paths of a config's servables and emits what each look finds.

    A subclass says how one servable is looked at (:meth:`_scan`) and which
    base paths it takes (:meth:`_refusal`); this runs the polls: when
    connected, every ``file_system_poll_wait_seconds`` on a thread of its own
    (longer when a full poll's CPU time is more than a tenth of that: polling
    takes at most ~10% of a core however many servables there are; and at
    once for names :meth:`_mark_dirty` names), by hand with
    :meth:`poll_once`, and in :meth:`update_config`.  Each look's condition is
    kept (:meth:`servable_errors`, :meth:`holds_no_version`), logged when it
    begins and ends, and published on :attr:`storage_conditions`.
    Thread-safe.
    """

    _thread_name = "servinglib-fs-source"
    _what = "file-system poll"

    def __init__(self, config: FileSystemStoragePathSourceConfig, *, clock: Clock | None) -> None:
        super().__init__()
        self._check_servables(config.servables)
        self._clock = clock if clock is not None else SystemClock()
        self._lock = threading.Lock()
        self._config = config  # guarded by: _lock (writes)
        self._found: dict[str, StorageCondition] = {}  # guarded by: _lock; none clear
        self._last: dict[str, tuple[ServableData[StoragePath], ...]] = {}  # guarded by: _lock
        self._dirty: set[str] = set()  # guarded by: _lock
        self._full_poll_due = False  # guarded by: _lock
        self._timer: Timer | None = None  # guarded by: _lock
        self._poll_lock = threading.Lock()  # serializes polls
        self._settling = VersionSettling(config.settle_window_s)  # guarded by: _poll_lock
        self._logged: dict[str, str] = {}  # guarded by: _poll_lock
        self._stop = threading.Event()
        self._loop: WakeLoop | None = None
        self._conditions = EventBus[StorageCondition]()
        self._looked = EventBus[str]()

    @property
    def config(self) -> FileSystemStoragePathSourceConfig:
        """The current configuration."""
        return self._config

    @property
    def polling(self) -> bool:
        """True while the polling thread runs."""
        return self._loop is not None and self._loop.running

    @property
    def storage_conditions(self) -> EventBus[StorageCondition]:
        """Publishes a servable's :class:`StorageCondition` when a look finds it changed, and a
        clear one when the servable is no longer watched.

        Delivered on the polling thread (or the caller of :meth:`update_config`
        / :meth:`poll_once`), after the versions that look found were emitted:
        keep subscribers quick.  A ServableStateMonitor follows it.
        """
        return self._conditions

    @property
    def looked_at(self) -> EventBus[str]:
        """Deprecated: follow :attr:`storage_conditions` (with a ServableStateMonitor's
        ``changes``).  Publishes a servable's name after each look at its base path."""
        warnings.warn(
            "looked_at is deprecated: follow storage_conditions (a ServableStateMonitor given "
            "them announces each on its changes bus)",
            DeprecationWarning,
            stacklevel=2,
        )
        return self._looked

    def servable_errors(self) -> dict[str, ServingError]:
        """Servables whose last poll failed, by name, with why.

        A base path that is missing, not a directory or unreadable (or a store
        that cannot be listed); with ``servable_versions_always_present``,
        also one without versions.  (Without it an empty base path is not an
        error: it unloads the servable.)
        """
        with self._lock:
            return {n: c.error for n, c in self._found.items() if c.error is not None}

    def holds_no_version(self, name: str) -> bool:
        """True if ``name``'s base path was read and holds no version to serve, nor one waiting.

        A version directory not yet complete and quiet is waiting: False.
        """
        with self._lock:
            found = self._found.get(name)
        return found is not None and found.holds_no_version

    def update_config(self, config: FileSystemStoragePathSourceConfig) -> None:
        """Replaces what is monitored: removed servables get an empty aspired set (unload).

        New and changed servables are polled before this returns (when the
        source is connected and polls).  Raises InvalidArgumentError if the
        poll period, event watching or settle window changes (fixed at
        construction), or for a base path this source does not take.
        """
        with self._poll_lock:
            if self._stop.is_set():
                return
            old = self._config
            if any(getattr(config, field) != getattr(old, field) for field in _FIXED):
                raise InvalidArgumentError(f"{', '.join(_FIXED)} cannot change")
            self._check_servables(config.servables)
            kept = {s.servable_name for s in config.servables}
            removed = [s.servable_name for s in old.servables if s.servable_name not in kept]
            before = set(old.servables)
            changed = [s for s in config.servables if s not in before]
            with self._lock:
                self._config = config
                for name in removed:
                    self._found.pop(name, None)
                    self._last.pop(name, None)
            for name in removed:
                self._logged.pop(name, None)
                self.emit_aspired_versions(name, [])
                self._conditions.publish(StorageCondition(name))
            for servable in old.servables:
                if servable.servable_name in removed or servable in changed:
                    self._forget(servable, removed=servable.servable_name in removed)
            if self._polls() and self._connected():
                self._poll_servables(changed, emit_unchanged=True)
        self._config_changed(old, config, changed)

    def poll_once(self) -> None:
        """Polls every servable now and emits each one's aspired versions (not after close)."""
        with self._poll_lock:
            if self._stop.is_set():
                return
            self._poll_servables(self._config.servables, emit_unchanged=True)
            self._polled_all_locked()

    def close(self) -> None:
        """Stops polling; idempotent.  Emits nothing more once it returns."""
        self._stop.set()
        with self._poll_lock:  # a poll in progress ends; none starts (they check _stop)
            pass
        with self._lock:
            timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        if self._loop is not None:
            self._loop.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- what a subclass says -------------------------------------------------

    @abc.abstractmethod
    def _scan(self, servable: ServableToMonitor, *, full: bool) -> Scan:
        """Looks at ``servable``'s base path (``full``: in a full poll); under the poll lock."""

    @abc.abstractmethod
    def _refusal(self, servable: ServableToMonitor) -> str | None:
        """Why this source does not take ``servable``'s base path, or None."""

    # Hooks.  Under the poll lock: ``servable`` was removed or changed; a full poll ended.
    def _forget(self, servable: ServableToMonitor, *, removed: bool) -> None:
        self._settling.forget(servable.base_path)

    def _polled_all_locked(self) -> None:
        pass

    # No lock held: after update_config; when settle windows end (clock times).
    def _config_changed(
        self,
        old: FileSystemStoragePathSourceConfig,
        new: FileSystemStoragePathSourceConfig,
        changed: Sequence[ServableToMonitor],
    ) -> None:
        pass

    def _schedule_recheck(self, due: Mapping[str, float]) -> None:
        pass

    # -- polling --------------------------------------------------------------

    def _check_servables(self, servables: Iterable[ServableToMonitor]) -> None:
        for servable in servables:
            refusal = self._refusal(servable)
            if refusal is not None:
                raise InvalidArgumentError(
                    f"{type(self).__name__} cannot watch servable {servable.servable_name}: "
                    f"{refusal}"
                )

    def _on_connected(self) -> None:
        if not self._polls():
            return
        try:
            self.poll_once()
        except Exception:  # noqa: BLE001 - a failing target must not stop the polling
            _log.exception("the first %s failed; polling goes on", self._what)
        if self._config.file_system_poll_wait_seconds > 0:
            self._loop = WakeLoop(self._thread_name, self._poll_step, what=self._what)
            self._loop.start()
            self._schedule_full_poll()

    def _polls(self) -> bool:
        return self._config.file_system_poll_wait_seconds >= 0

    def _connected(self) -> bool:
        with self._emit_lock:
            return self._callback is not None

    def _schedule_full_poll(self, *, poll_cpu_s: float = 0.0) -> None:
        """The next full poll: a period from now, or more after a poll that took ``poll_cpu_s``
        of CPU (so full polls take at most ``_MAX_POLL_CPU_SHARE`` of a core)."""
        period = self._config.file_system_poll_wait_seconds
        wait_s = max(period, poll_cpu_s * (1 - _MAX_POLL_CPU_SHARE) / _MAX_POLL_CPU_SHARE)

        def due() -> None:
            with self._lock:
                self._full_poll_due = True
            self._wake()

        with self._lock:
            if not self._stop.is_set():
                self._timer = self._clock.call_later(wait_s, due)

    def _poll_step(self) -> None:
        """What the polling thread does when woken: a full poll when due, else the dirty names."""
        with self._lock:
            full, self._full_poll_due = self._full_poll_due, False
            dirty, self._dirty = self._dirty, set()
        started_cpu_s = time.thread_time()
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
                self._schedule_full_poll(poll_cpu_s=time.thread_time() - started_cpu_s)

    def _mark_dirty(self, names: set[str]) -> None:
        """Has the polling thread look at ``names`` as soon as it is free."""
        with self._lock:
            self._dirty |= names
        self._wake()

    def _wake(self) -> None:
        if self._loop is not None:
            self._loop.wake()

    def _emitted(self, name: str) -> tuple[ServableData[StoragePath], ...]:
        """What was emitted last for ``name`` (the empty set if nothing)."""
        with self._lock:
            return self._last.get(name, ())

    def _poll_servables(
        self, servables: Iterable[ServableToMonitor], *, emit_unchanged: bool
    ) -> None:
        recheck: dict[str, float] = {}
        for servable in servables:
            name = servable.servable_name
            scan = self._scan(servable, full=emit_unchanged)
            if self._stop.is_set():
                return  # closing: the scan's store work may have been cut short
            with self._lock:
                unchanged = scan.versions is not None and self._last.get(name) == scan.versions
                if scan.versions is not None:
                    self._last[name] = scan.versions
                empty = self._last.get(name) == () and not scan.waiting
                before = self._found.get(name, StorageCondition(name))
                condition = StorageCondition(name, scan.error, empty)
                news = not _same(condition, before)
                if condition.clear:
                    self._found.pop(name, None)
                elif news:
                    self._found[name] = condition
            self._log_condition(name, scan.condition)
            if scan.recheck_at is not None:
                recheck[name] = scan.recheck_at
            if scan.versions is not None and (emit_unchanged or not unchanged):
                self.emit_aspired_versions(name, scan.versions)
            if news:
                self._conditions.publish(condition)
            self._looked.publish(name)
        if recheck:
            self._schedule_recheck(recheck)

    def _log_condition(self, name: str, condition: tuple[int, str] | None) -> None:
        """Logs a servable's condition when it begins, changes and ends; not on every poll."""
        before = self._logged.get(name)
        if condition is None:
            if before is not None:
                del self._logged[name]
                _log.info("servable %s: resolved: %s", name, before)
            return
        level, message = condition
        if before != message:
            self._logged[name] = message
            _log.log(level, "%s", message)


def _same(a: StorageCondition, b: StorageCondition) -> bool:
    """True if ``a`` says what ``b`` says (each poll makes its errors anew)."""
    errors = [(type(c.error), c.error.message) if c.error else None for c in (a, b)]
    return a.holds_no_version == b.holds_no_version and errors[0] == errors[1]
