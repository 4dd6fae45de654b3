"""What a storage path source watches, and how: ServableToMonitor and the source config."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, final

import attrs

from servinglib.core.servable_id import check_name
from servinglib.errors import InvalidArgumentError
from servinglib.sources.version_check import VersionCheck
from servinglib.sources.version_policy import ServableVersionPolicy


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
    """What a storage path source watches, and how (FileSystemStoragePathSource's,
    RemoteStoragePathSource's and BasePathSource's config).

    Every field, its default and unit: docs/guides/file-system-source.md
    ("Configuration").  ``file_system_poll_wait_seconds``: poll period; 0 polls once
    when connected, a negative value never polls by itself (call ``poll_once``).
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
