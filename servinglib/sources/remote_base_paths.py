"""RemoteBasePaths: a source's object-store base paths, each mirrored, listed with backoff.

The remote source serves a remote base path (``s3://...``) through a
:class:`RemoteMirror`, a local copy of its complete versions.  This keeps
one mirror per servable, made with its ``storage_options``;
after a failed sync it waits before listing that store again (doubling from
the poll period up to :data:`MAX_BACKOFF_S`, so a store that is down or
throttling is not asked every second); and it publishes what each store
did as :class:`StoreEvent`\\ s (versions downloaded, listings and downloads
that failed), which the server's metrics count.  Their listings and
downloads share one :class:`StoreWork`, which the source cancels when it
closes.  The mirror of a servable taken out of the config (or moved to
another base path) is retired: its copies are removed once none of their
versions is in use downstream any more (:meth:`RemoteBasePaths.sweep`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from typing import Any, final

from servinglib.core.event_bus import EventBus
from servinglib.errors import ServingError
from servinglib.sources.remote_mirror import RemoteMirror, StoreEvent, default_cache_dir
from servinglib.sources.store_work import StoreWork
from servinglib.sources.version_policy import ServableVersionPolicy

_log = logging.getLogger("servinglib.sources.file_system_storage_path_source")

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
        self._retired: list[tuple[str, RemoteMirror]] = []  # (servable name, its old mirror)
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
        in_use: Collection[int] = (),
    ) -> RemoteMirror:
        """Syncs ``url``'s mirror for servable ``name`` and returns it (see RemoteMirror.sync,
        which keeps the copies of the versions ``in_use``).

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
            mirror.sync(policy, in_use)
        except ServingError as error:
            count = failure[0] + 1 if failure is not None else 1
            wait_s = min(MAX_BACKOFF_S, period_s * 2 ** (count - 1)) if period_s > 0 else 0.0
            self._failures[name] = (count, now + wait_s, error)
            raise
        self._failures.pop(name, None)
        return mirror

    def forget(self, name: str) -> None:
        """Retires servable ``name``'s mirror (the servable was removed): :meth:`sweep` removes
        its copies once its versions are no longer in use."""
        self._failures.pop(name, None)
        mirror = self._mirrors.pop(name, None)
        if mirror is not None:
            self._retired.append((name, mirror))

    def sweep(self, in_use: Callable[[str], Collection[int]]) -> None:
        """Removes the cache directory of each retired mirror none of whose copies'
        versions is ``in_use(servable name)`` any more."""
        kept = []
        for name, mirror in self._retired:
            if mirror.copied_versions() & set(in_use(name)):
                kept.append((name, mirror))
            else:
                mirror.close(remove=True)
                _log.info("Removed the local copies of %s (%s)", mirror.url, mirror.local_base)
        self._retired = kept

    def close(self) -> None:
        """Gives up every cache directory: private ones and retired mirrors' are removed, the
        others kept for the next start."""
        for _name, mirror in self._retired:
            mirror.close(remove=True)
        for mirror in self._mirrors.values():
            mirror.close()
        self._retired, self._mirrors = [], {}

    def _mirror(
        self, name: str, url: str, storage_options: Mapping[str, Any] | None
    ) -> RemoteMirror:
        mirror = self._mirrors.get(name)
        wanted = (url.rstrip("/"), storage_options)  # as RemoteMirror keeps its url
        if mirror is None or (mirror.url, mirror.storage_options) != wanted:
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
                download_concurrency=self._concurrency,
                done_marker=self._marker,
                storage_options=storage_options,
                servable_name=name,
                on_event=self.events.publish,
                work=self.work,
            )
            self._mirrors[name] = mirror
        return mirror
