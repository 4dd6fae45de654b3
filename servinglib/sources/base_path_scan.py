"""One look at a base path: its version directories, and which of the complete, quiet ones
the servable's policy picks."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping

import attrs

from servinglib.core.servable_data import ServableData
from servinglib.core.servable_id import ServableId
from servinglib.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ServingError,
    UnavailableError,
)
from servinglib.sources._version_settling import VersionSettling
from servinglib.sources.source import StoragePath
from servinglib.sources.storage_path_source_config import (
    FileSystemStoragePathSourceConfig,
    ServableToMonitor,
)

_log = logging.getLogger("servinglib.sources.file_system_storage_path_source")

_VERSION_NAME = re.compile(r"[0-9]+")

BARE_MODEL_VERSION = 0
"""The version of a model put in the base path itself, without numbered version directories.

0 sorts below every version a publisher numbers (from 1, as TF Serving's
examples do), so the first numbered version published replaces it by the
usual swap.
"""


@attrs.frozen
class Scan:
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


def scan_base_path(
    servable: ServableToMonitor,
    config: FileSystemStoragePathSourceConfig,
    settling: VersionSettling,
    last: tuple[ServableData[StoragePath], ...],
    now: float,
    *,
    by_hand: bool,
    local: str | None = None,
) -> Scan:
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
        return Scan(None, error, (logging.WARNING, error.message))
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
        return Scan(versions, recheck_at=recheck_at)
    if found and not ready:  # each waiting version said so once
        # What serves keeps serving until a version is ready (say, the base path moved to
        # files still being written): emitting none would unload it for the wait.
        return Scan(None, recheck_at=recheck_at, waiting=True)
    message = f"No versions of servable {name} found under base path {base}" + (
        f" (policy {servable.version_policy})" if ready else ""
    )
    if config.servable_versions_always_present:
        error = FailedPreconditionError(
            f"{message}; keeping the versions it serves (servable_versions_always_present)"
        )
        return Scan(None, error, (logging.WARNING, error.message), recheck_at)
    return Scan(versions, None, (logging.WARNING, message), recheck_at)


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
