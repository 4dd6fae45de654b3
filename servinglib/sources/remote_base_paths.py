"""RemoteBasePaths: a source's object-store base paths, each mirrored, listed with backoff.

The file-system source serves a remote base path (``s3://...``) through a
:class:`RemoteMirror`, a local copy of its complete versions.  This keeps
one mirror per servable, made with its ``storage_options``;
after a failed sync it waits before listing that store again (doubling from
the poll period up to :data:`MAX_BACKOFF_S`, so a store that is down or
throttling is not asked every second); and it publishes what each store
did as :class:`StoreEvent`\\ s (versions downloaded, listings and downloads
that failed), which the server's metrics count.  Their listings and
downloads share one :class:`StoreWork`, which the source cancels when it
closes.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from typing import Any, final

from servinglib.core.event_bus import EventBus
from servinglib.errors import ServingError
from servinglib.sources.remote_mirror import RemoteMirror, StoreEvent, default_cache_dir
from servinglib.sources.store_work import StoreWork
from servinglib.sources.version_policy import ServableVersionPolicy

MAX_BACKOFF_S = 60.0
"""The longest wait between listings of a store whose last sync failed."""


@final
class RemoteBasePaths:
    """The mirrors of the remote base paths a source serves, synced with backoff after failures.

    ``cache_dir``: the cache root (None: :func:`default_cache_dir`);
    ``download_concurrency`` and ``done_marker``: each mirror's (see
    :class:`RemoteMirror`).  Not thread-safe: the source calls it under its
    poll lock; but :attr:`work` is, and any thread may read or cancel it.
    """

    def __init__(
        self, cache_dir: str | None, *, download_concurrency: int, done_marker: str | None
    ) -> None:
        self._cache_dir = cache_dir or default_cache_dir()
        self._concurrency = download_concurrency
        self._marker = done_marker
        self._mirrors: dict[str, RemoteMirror] = {}  # servable name → its mirror
        # servable name → failed syncs in a row, no listing before (clock time), the last error
        self._failures: dict[str, tuple[int, float, ServingError]] = {}
        self.events = EventBus[StoreEvent]()
        self.work = StoreWork()
        """The listings and downloads running now; cancelled, they end and no more start."""
        """What each store did (see StoreEvent), published on the polling thread."""

    def local_base(self, name: str) -> str | None:
        """The local directory mirroring servable ``name``'s base path, once it was synced."""
        mirror = self._mirrors.get(name)
        return mirror.local_base if mirror is not None else None

    def sync(
        self,
        name: str,
        url: str,
        policy: ServableVersionPolicy,
        storage_options: Mapping[str, Any] | None,
        *,
        now: float,
        period_s: float,
    ) -> RemoteMirror:
        """Syncs ``url``'s mirror for servable ``name`` and returns it (see RemoteMirror.sync).

        Raises ServingError when the store cannot be listed or a version
        cannot be downloaded, and, without asking the store, while the wait
        after such a failure lasts (``period_s`` doubled per failure in a
        row, up to :data:`MAX_BACKOFF_S`; 0: no wait).
        """
        mirror = self._mirror(name, url, storage_options)  # a new one is asked at once
        failure = self._failures.get(name)
        if failure is not None and now < failure[1]:
            raise failure[2]
        try:
            mirror.sync(policy)
        except ServingError as error:
            count = failure[0] + 1 if failure is not None else 1
            wait_s = min(MAX_BACKOFF_S, period_s * 2 ** (count - 1)) if period_s > 0 else 0.0
            self._failures[name] = (count, now + wait_s, error)
            raise
        self._failures.pop(name, None)
        return mirror

    def forget(self, name: str) -> None:
        """Drops servable ``name``'s mirror and its cached copies (the servable was removed)."""
        self._failures.pop(name, None)
        mirror = self._mirrors.pop(name, None)
        if mirror is not None:
            shutil.rmtree(mirror.local_base, ignore_errors=True)

    def _mirror(
        self, name: str, url: str, storage_options: Mapping[str, Any] | None
    ) -> RemoteMirror:
        mirror = self._mirrors.get(name)
        wanted = (url.rstrip("/"), storage_options)  # as RemoteMirror keeps its url
        if mirror is None or (mirror.url, mirror.storage_options) != wanted:
            self._failures.pop(name, None)
            mirror = RemoteMirror(
                url,
                self._cache_dir,
                download_concurrency=self._concurrency,
                done_marker=self._marker,
                storage_options=storage_options,
                servable_name=name,
                on_event=self.events.publish,
                work=self.work,
            )
            self._mirrors[name] = mirror
        return mirror
