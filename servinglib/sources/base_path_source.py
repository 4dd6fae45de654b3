"""BasePathSource: the versions under servables' base paths, local or in an object store."""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Sequence
from typing import final

import attrs

from servinglib.core.clock import Clock
from servinglib.core.event_bus import EventBus
from servinglib.core.servable_data import ServableData
from servinglib.core.storage_condition import StorageCondition
from servinglib.errors import ServingError
from servinglib.sources.file_system_storage_path_source import FileSystemStoragePathSource
from servinglib.sources.remote_mirror import StoreEvent
from servinglib.sources.remote_storage_path_source import RemoteStoragePathSource
from servinglib.sources.remote_store import is_remote
from servinglib.sources.source import Source, StoragePath
from servinglib.sources.storage_path_source_config import FileSystemStoragePathSourceConfig


@final
class BasePathSource(Source[StoragePath]):
    """Watches each servable of its config with the source for its kind of base path.

    A directory: a :class:`FileSystemStoragePathSource`; an object-store
    prefix: a :class:`RemoteStoragePathSource` (given ``in_use``); their
    emissions and storage conditions are this source's.  A servable moved
    from one kind to the other is dropped by the first before the second
    looks at it, and the first's empty set is not passed on: the second's
    replaces what serves, as when a base path changes within one kind.
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
        self._update_lock = threading.Lock()  # serializes update_config
        self._config = config  # guarded by: _update_lock (writes)
        self._moving: frozenset[str] = frozenset()  # guarded by: _update_lock (writes)
        local, remote = _split(config)
        self._local = FileSystemStoragePathSource(local, clock=clock)
        self._remote = RemoteStoragePathSource(remote, clock=clock, in_use=in_use)
        self._conditions = EventBus[StorageCondition]()
        for source in (self._local, self._remote):
            source.storage_conditions.subscribe(self._conditions.publish)

    @property
    def config(self) -> FileSystemStoragePathSourceConfig:
        """The current configuration (every servable, of both kinds)."""
        return self._config

    @property
    def storage_conditions(self) -> EventBus[StorageCondition]:
        """Both sources' storage conditions (see FileSystemStoragePathSource's)."""
        return self._conditions

    @property
    def store_events(self) -> EventBus[StoreEvent]:
        """What the object stores did: downloads, failed listings (the remote source's)."""
        return self._remote.store_events

    def store_work(self) -> list[str]:
        """What the object stores are doing now (the remote source's, for a stop's log)."""
        return self._remote.store_work()

    def servable_errors(self) -> dict[str, ServingError]:
        """Servables whose last poll failed, by name, with why (both sources')."""
        return {**self._local.servable_errors(), **self._remote.servable_errors()}

    def update_config(self, config: FileSystemStoragePathSourceConfig) -> None:
        """Replaces what is watched (see FileSystemStoragePathSource.update_config)."""
        with self._update_lock:
            local, remote = _split(config)
            sources = ((self._local, local), (self._remote, remote))
            was_local, was_remote = _names(self._local.config), _names(self._remote.config)
            self._moving = (_names(local) & was_remote) | (_names(remote) & was_local)
            # What each source gives up first, then what it takes.
            try:
                for source, part in sources:
                    had = _names(source.config)
                    kept = [s for s in part.servables if s.servable_name in had]
                    source.update_config(attrs.evolve(part, servables=kept))
            finally:
                self._moving = frozenset()
            for source, part in sources:
                source.update_config(part)
            self._config = config

    def poll_once(self) -> None:
        """Polls every servable now, local ones first (not after close)."""
        self._local.poll_once()
        self._remote.poll_once()

    def close(self) -> None:
        """Closes both sources (store work in progress is cancelled); idempotent."""
        self._remote.close()
        self._local.close()

    def __enter__(self) -> BasePathSource:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _on_connected(self) -> None:
        self._local.set_aspired_versions_callback(self._forward)
        self._remote.set_aspired_versions_callback(self._forward)

    def _forward(self, name: str, versions: Sequence[ServableData[StoragePath]]) -> None:
        if versions or name not in self._moving:  # the other source's set replaces it
            self.emit_aspired_versions(name, versions)


def _split(
    config: FileSystemStoragePathSourceConfig,
) -> tuple[FileSystemStoragePathSourceConfig, FileSystemStoragePathSourceConfig]:
    """``config`` for the local base paths, and for the remote ones."""
    remote = [s for s in config.servables if is_remote(s.base_path)]
    local = [s for s in config.servables if not is_remote(s.base_path)]
    return attrs.evolve(config, servables=local), attrs.evolve(config, servables=remote)


def _names(config: FileSystemStoragePathSourceConfig) -> frozenset[str]:
    return frozenset(s.servable_name for s in config.servables)
