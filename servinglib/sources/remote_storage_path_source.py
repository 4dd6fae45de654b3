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
from servinglib.sources.remote_base_paths import RemoteBasePaths
from servinglib.sources.remote_mirror import StoreEvent
from servinglib.sources.remote_store import is_remote
from servinglib.sources.source import StoragePath
from servinglib.sources.storage_path_source_config import (
    FileSystemStoragePathSourceConfig,
    ServableToMonitor,
)

_log = logging.getLogger(__name__)


@final
class RemoteStoragePathSource(BasePathPolling):
    """Mirrors object-store base paths (``s3://``, ``gs://``, ``az://``) and aspires their copies.

    Each poll of a servable lists its base path, copies the complete versions
    its policy picks into the config's ``model_cache_dir`` (see
    :class:`RemoteMirror`; a store that failed is asked again with backoff,
    see :class:`RemoteBasePaths`) and emits, as a FileSystemStoragePathSource
    does for a directory, the versions of that copy: a copy is renamed into
    place whole, so it needs no settle window.  A version refused for an
    unsafe key is emitted as an error beside what serves; versions listed but
    not complete yet are waited for.  It polls on a thread of its own, so a
    store that is slow to answer delays no local base path.  ``in_use``: the
    versions of a servable still loading, serving or unloading downstream
    (say, those a manager holds that have not ended); a copy is kept while
    its version is in use and removed at the first full poll after (None:
    a copy goes as soon as the policy drops its version).  It is called
    under the source's poll lock: it must not call back into this source.
    A local base path is refused (InvalidArgumentError).
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
        self._mirrors = RemoteBasePaths(  # guarded by: _poll_lock
            config.model_cache_dir,
            download_concurrency=config.download_concurrency,
            done_marker=config.version_done_marker,
        )

    @property
    def store_events(self) -> EventBus[StoreEvent]:
        """Publishes what the stores did: downloads and failures.

        Delivered on the polling thread: keep subscribers quick.
        """
        return self._mirrors.events

    def store_work(self) -> list[str]:
        """What the stores are doing now: each listing and download running, with its progress
        and how long it has taken (for a stop's log)."""
        return self._mirrors.work.describe()

    def close(self) -> None:
        """Stops polling; idempotent.  Emits nothing more once it returns.

        A listing or download in progress is cancelled (and logged, naming
        it), so closing does not wait for it.
        """
        self._stop.set()
        cancelled = self._mirrors.work.cancel()
        if cancelled:
            _log.info("Closing the remote source: cancelled %s", "; ".join(cancelled))
        super().close()
        with self._poll_lock:
            self._mirrors.close()

    def __enter__(self) -> RemoteStoragePathSource:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _refusal(self, servable: ServableToMonitor) -> str | None:
        if not is_remote(servable.base_path):
            return f"its base path {servable.base_path} is not in an object store"
        return None

    def _scan(self, servable: ServableToMonitor, *, full: bool) -> Scan:
        """Syncs the mirror of ``servable``'s base path, then looks at the copy."""
        config, now, name = self._config, self._clock.now(), servable.servable_name
        by_hand = config.file_system_poll_wait_seconds <= 0
        try:
            mirror = self._mirrors.sync(
                name,
                servable.base_path,
                servable.version_policy,
                servable.storage_options,
                now=now,
                period_s=0.0 if by_hand else config.file_system_poll_wait_seconds,
                in_use=self._in_use(name),
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

    def _forget(self, servable: ServableToMonitor, *, removed: bool) -> None:
        local = self._mirrors.local_base(servable.servable_name)
        if local is not None:
            self._settling.forget(local)
        if removed:
            self._mirrors.forget(servable.servable_name)

    def _polled_all_locked(self) -> None:
        self._mirrors.sweep(self._in_use)
