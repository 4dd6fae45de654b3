"""RemoteStoragePathSource: aspires the complete versions of object-store base paths, mirrored."""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from typing import final

import attrs

from servinglib.core.clock import Clock
from servinglib.core.event_bus import EventBus
from servinglib.core.servable_data import ServableData
from servinglib.core.servable_id import ServableId
from servinglib.errors import ServingError
from servinglib.sources._base_path_polling import BasePathPolling
from servinglib.sources.base_path_scan import Scan, scan_base_path
from servinglib.sources.remote_mirror import RemoteMirror, StoreEvent, default_cache_dir
from servinglib.sources.remote_store import is_remote
from servinglib.sources.source import StoragePath
from servinglib.sources.storage_path_source_config import (
    FileSystemStoragePathSourceConfig,
    ServableToMonitor,
)
from servinglib.sources.store_work import StoreWork

_log = logging.getLogger(__name__)

MAX_BACKOFF_S = 60.0
"""The longest wait between listings of a store whose last sync failed."""


@final
class RemoteStoragePathSource(BasePathPolling):
    """Mirrors object-store base paths (``s3://``, ``gs://``, ``az://``) and aspires their copies.

    Each poll of a servable lists its base path, copies the complete versions
    its policy picks into the config's ``model_cache_dir`` (one
    :class:`RemoteMirror` per servable) and emits the versions of that copy,
    as FileSystemStoragePathSource does for a directory.  After a failed sync
    a store is not asked again for the poll period, doubled per failure in a
    row, up to :data:`MAX_BACKOFF_S`.  ``in_use``: the versions of a servable
    still loading, serving or unloading downstream, whose copies are kept
    (None: a copy goes as soon as the policy drops its version); it is called
    under the source's poll lock and must not call back into this source.  A
    local base path is refused (InvalidArgumentError).  How it behaves on
    faults and unsafe keys: docs/guides/remote-storage.md.
    Thread-safe.
    """

    _thread_name = "servinglib-remote-source"
    _what = "object-store poll"

    def __init__(
        self,
        config: FileSystemStoragePathSourceConfig,
        *,
        clock: Clock | None = None,
        in_use: Callable[[str], Collection[int]] | None = None,
    ) -> None:
        super().__init__(config, clock=clock)
        self._in_use: Callable[[str], Collection[int]] = in_use or (lambda _name: ())
        self._cache_dir = config.model_cache_dir or default_cache_dir()
        # All guarded by: _poll_lock.  Servable name → its mirror; retired (name, mirror)s;
        # name → (failed syncs in a row, no listing before this clock time, the last error).
        self._mirrors: dict[str, RemoteMirror] = {}
        self._retired: list[tuple[str, RemoteMirror]] = []
        self._failures: dict[str, tuple[int, float, ServingError]] = {}
        self._store_events = EventBus[StoreEvent]()
        self._work = StoreWork()  # the mirrors' listings and downloads; cancelled by close()

    @property
    def store_events(self) -> EventBus[StoreEvent]:
        """Publishes what the stores did: downloads and failures.

        Delivered on the polling thread: keep subscribers quick.
        """
        return self._store_events

    def store_work(self) -> list[str]:
        """What the stores are doing now: each listing and download running, with its progress
        and how long it has taken (for a stop's log)."""
        return self._work.describe()

    def close(self) -> None:
        """Stops polling; idempotent.  Emits nothing more once it returns.

        A listing or download in progress is cancelled (and logged, naming
        it), so closing does not wait for it.  The copies of removed
        servables are deleted; the others are kept for the next start.
        """
        self._stop.set()
        cancelled = self._work.cancel()
        if cancelled:
            _log.info("Closing the remote source: cancelled %s", "; ".join(cancelled))
        super().close()
        with self._poll_lock:
            for _name, mirror in self._retired:
                mirror.close(remove=True)
            for mirror in self._mirrors.values():
                mirror.close()
            self._retired, self._mirrors = [], {}

    def _refusal(self, servable: ServableToMonitor) -> str | None:
        if not is_remote(servable.base_path):
            return f"its base path {servable.base_path} is not in an object store"
        return None

    def _scan(self, servable: ServableToMonitor, *, full: bool) -> Scan:
        """Syncs the mirror of ``servable``'s base path, then looks at the copy."""
        config, now, name = self._config, self._clock.now(), servable.servable_name
        by_hand = config.file_system_poll_wait_seconds <= 0
        try:
            mirror = self._sync(
                servable, now, 0.0 if by_hand else config.file_system_poll_wait_seconds
            )
        except ServingError as error:
            return Scan(None, error, (logging.WARNING, error.message))
        # A mirror has no events: each poll looks at the copies it offered (a new copy heals).
        last = self._emitted(name)
        local = mirror.local_base
        scan = scan_base_path(
            servable, config, self._settling, last, now, by_hand=by_hand, local=local
        )
        if mirror.refused and scan.versions is not None:
            # Refused versions end in error beside what serves (the manager records each).
            refused = tuple(
                ServableData[StoragePath](ServableId(name, v), error=error)
                for v, error in sorted(mirror.refused.items())
            )
            return attrs.evolve(scan, versions=scan.versions + refused, waiting=False)
        if mirror.pending and not scan.versions:  # listed, not complete yet: keep waiting
            return Scan(None, waiting=True)
        return scan

    def _sync(self, servable: ServableToMonitor, now: float, period_s: float) -> RemoteMirror:
        """Syncs ``servable``'s mirror, keeping the copies in use; raises ServingError when the
        store fails, and without asking it while the wait after a failure lasts."""
        name = servable.servable_name
        mirror = self._mirror(servable)  # a new one is asked at once
        failure = self._failures.get(name)
        if failure is not None and now < failure[1]:
            raise failure[2]
        try:
            mirror.sync(servable.version_policy, self._in_use(name))
        except ServingError as error:
            count = failure[0] + 1 if failure is not None else 1
            wait_s = min(MAX_BACKOFF_S, period_s * 2 ** (count - 1)) if period_s > 0 else 0.0
            self._failures[name] = (count, now + wait_s, error)
            raise
        self._failures.pop(name, None)
        return mirror

    def _mirror(self, servable: ServableToMonitor) -> RemoteMirror:
        name, url, storage_options = (
            servable.servable_name,
            servable.base_path,
            servable.storage_options,
        )
        mirror = self._mirrors.get(name)
        wanted = (url.rstrip("/"), storage_options)  # as RemoteMirror keeps its url
        if mirror is not None and (mirror.url, mirror.storage_options) == wanted:
            return mirror
        self._failures.pop(name, None)
        # The old mirror of the same base path hands its cache directory over; one of
        # another base path is retired.  So is a removed servable's, unless it is back.
        old = [(name, mirror)] if mirror is not None else []
        old += [(n, m) for n, m in self._retired if n == name and m.url == wanted[0]]
        self._retired = [(n, m) for n, m in self._retired if (n, m) not in old]
        for _name, previous in old:
            if previous.url == wanted[0]:
                previous.close()
            else:
                self._retired.append((name, previous))
        mirror = RemoteMirror(
            url,
            self._cache_dir,
            download_concurrency=self._config.download_concurrency,
            done_marker=self._config.version_done_marker,
            storage_options=storage_options,
            servable_name=name,
            on_event=self._store_events.publish,
            work=self._work,
        )
        self._mirrors[name] = mirror
        return mirror

    def _forget(self, servable: ServableToMonitor, *, removed: bool) -> None:
        name = servable.servable_name
        mirror = self._mirrors.get(name)
        if mirror is not None:
            self._settling.forget(mirror.local_base)
        if removed:  # its copies go once none of their versions is in use (_polled_all_locked)
            self._failures.pop(name, None)
            if mirror is not None:
                self._retired.append((name, self._mirrors.pop(name)))

    def _polled_all_locked(self) -> None:
        kept = []
        for name, mirror in self._retired:
            if mirror.copied_versions() & set(self._in_use(name)):
                kept.append((name, mirror))
            else:
                mirror.close(remove=True)
                _log.info("Removed the local copies of %s (%s)", mirror.url, mirror.local_base)
        self._retired = kept
