"""RemoteMirror: the complete versions of a remote base path, copied once into a local cache."""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Collection, Mapping
from typing import Any, Literal, final

import attrs

from servinglib.errors import (
    CancelledError,
    InvalidArgumentError,
    ServingError,
    UnavailableError,
)
from servinglib.sources.cache_claim import CacheClaim
from servinglib.sources.remote_keys import (
    is_directory_marker,
    local_targets,
    shown_key,
    unsafe_key_reason,
)
from servinglib.sources.remote_store import open_store
from servinglib.sources.store_work import StoreWork
from servinglib.sources.version_policy import ServableVersionPolicy

_log = logging.getLogger("servinglib.sources.file_system_storage_path_source")

_VERSION_NAME = re.compile(r"[0-9]+")
_PARTIAL = ".partial-"

Listing = Mapping[str, tuple[int, str]]
"""A version's files: path relative to the version → (size, ETag or "" when the store has none)."""


@final
@attrs.frozen
class StoreEvent:
    """What a remote base path's store did for a servable.

    ``kind``: ``"downloaded"`` (``version`` copied into the cache:
    ``size_bytes`` in ``seconds``), ``"listing_failed"`` or
    ``"download_failed"`` (``error`` says why; what was copied before keeps
    serving; also a version refused for an unsafe key, reported once per
    listing).  Immutable, so thread-safe.
    """

    servable_name: str
    base_path: str
    kind: Literal["downloaded", "listing_failed", "download_failed"]
    version: int | None = None
    size_bytes: int = 0
    seconds: float = 0.0
    error: ServingError | None = None


def default_cache_dir() -> str:
    """Where downloaded versions go unless told otherwise: under the system temp directory."""
    return os.path.join(tempfile.gettempdir(), "servinglib-model-cache")


@final
class RemoteMirror:
    """Keeps a local copy of the complete versions of one remote base path that a policy picks.

    ``url``: the base path (``s3://bucket/prefix``); ``cache_dir``: the cache
    root; ``done_marker``: a version holding this object is complete at once;
    ``on_event``: called with each :class:`StoreEvent`; ``work``: runs its
    store calls (cancelling it ends a sync with CancelledError, leaving no
    partial copy; None: its own).  :attr:`local_base` is
    ``<cache_dir>/<base path>-<digest>`` when this mirror claimed it, else a
    private directory beside it, removed by :meth:`close`.
    Not thread-safe: the source calls it under its poll.
    """

    def __init__(
        self,
        url: str,
        cache_dir: str,
        *,
        download_concurrency: int = 8,
        done_marker: str | None = None,
        storage_options: Mapping[str, Any] | None = None,
        servable_name: str = "",
        on_event: Callable[[StoreEvent], None] | None = None,
        work: StoreWork | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.servable_name = servable_name
        digest = hashlib.sha256(f"{servable_name}\0{self.url}".encode()).hexdigest()[:16]
        readable = re.sub(r"[^A-Za-z0-9_.-]+", "_", self.url.split("://", 1)[-1])[-60:]
        shared = os.path.join(cache_dir, f"{readable}-{digest}")
        self._claim = CacheClaim(shared)
        self.local_base = self._claim.directory
        if self._claim.private:
            _log.warning(
                "The cache directory %s of %s is in use by another server (or model); "
                "downloading into %s instead, removed when the source closes",
                shared,
                self.url,
                self.local_base,
            )
        self._concurrency = max(1, download_concurrency)
        self._marker = done_marker
        self.storage_options = storage_options
        self._on_event = on_event
        self._work = work if work is not None else StoreWork()
        self._store: tuple[Any, str] | None = None
        self._previous: dict[int, Listing] = {}
        self._refusals: dict[int, tuple[Listing, ServingError]] = {}  # the last sync's
        self.pending = False  # the last sync listed versions not complete yet
        self.refused: dict[int, ServingError] = {}
        """The refused versions the policy would have picked, after the last sync, with why."""
        _remove_partials(self.local_base)

    def sync(self, policy: ServableVersionPolicy, in_use: Collection[int] = ()) -> str:
        """Lists the store, copies what became complete and is picked, removes what is not.

        ``in_use``: versions still loading, serving or unloading downstream;
        their copies stay even when the policy no longer picks them (they go
        at the first sync after).  Returns :attr:`local_base`;
        :attr:`pending` then says whether versions were listed that are not
        complete yet, and :attr:`refused` which refused versions the policy
        would have picked.  Raises
        UnavailableError when the store cannot be listed, or lists no version
        while copies exist (a bucket being rewritten): the copies then stay as
        they are; CancelledError once its work is cancelled.
        """
        listings = self._list()
        if not listings and self._copies():
            raise UnavailableError(
                f"Listing {self.url} found no versions; keeping the versions it serves"
            )
        previous, self._previous = self._previous, listings
        refused_before, self._refusals = self._refusals, {}
        complete = {
            version
            for version, listing in listings.items()
            if listing
            and (
                # A version refused last time is left out once when its keys change, even with a
                # marker: the manager then drops its error before the good version arrives.
                self._marker in listing and refused_before.get(version, (listing,))[0] == listing
                if self._marker is not None
                else listing in (previous.get(version), self._recorded(version))
            )
        }
        for version in sorted(complete):
            self._refuse_if_unsafe(version, listings[version], refused_before.get(version))
        # A version whose copy serves and whose objects are being rewritten keeps its place
        # (and its old copy) until the new objects are complete.
        copies = self._copies()
        self.pending = bool(listings.keys() - complete)
        offered = complete | (copies & listings.keys())
        would_pick = set(policy.select(offered))
        self.refused = {v: e for v, (_, e) in self._refusals.items() if v in would_pick}
        picked = set(policy.select(offered - self._refusals.keys()))
        for version in picked & complete:
            if self._recorded(version) != listings[version]:
                self._download(version, listings[version])
        for version in copies - picked - set(in_use):
            self._remove(version)
        return self.local_base

    def copied_versions(self) -> set[int]:
        """The versions whose whole copies are in :attr:`local_base`."""
        return self._copies()

    def close(self, *, remove: bool = False) -> None:
        """Gives up its cache directory (idempotent): a private one is removed, and any with
        ``remove`` (copies no one serves any more)."""
        self._claim.release(remove=remove)

    def _list(self) -> dict[int, Listing]:
        try:
            fs, root = self._open()
            with self._work.doing(f"listing {self.url}"):
                # A store that stops answering must not stop the polls of every other model.
                found = self._work.call(fs, "find", root, detail=True, timeout_s=LISTING_TIMEOUT_S)
        except ServingError:
            raise
        except Exception as exc:  # noqa: BLE001 - any store error: keep serving, say why
            error = UnavailableError(f"Cannot list {self.url}: {type(exc).__name__}: {exc}")
            self._report("listing_failed", error=error)
            raise error from None
        return _version_listings(found, root)

    def _refuse_if_unsafe(
        self, version: int, listing: Listing, before: tuple[Listing, ServingError] | None
    ) -> None:
        """Refuses ``version`` if a key of it cannot be a file of its copy (reported once)."""
        if before is not None and before[0] == listing:
            self._refusals[version] = before
            return
        for name in sorted(listing):
            reason = unsafe_key_reason(name)
            if reason is not None:
                error = InvalidArgumentError(
                    f"Refusing version {version} of {self.url}: its key {shown_key(name)} "
                    f"{reason}, so it cannot be a file of the version's copy; nothing of the "
                    "version is downloaded"
                )
                self._refusals[version] = (listing, error)
                _log.error("%s", error.message)
                self._report("download_failed", version, error=error)
                return

    def _open(self) -> tuple[Any, str]:
        if self._store is None:
            self._store = open_store(self.url, self.storage_options)
        return self._store

    def _copies(self) -> set[int]:
        with os.scandir(self.local_base) as entries:
            return {int(e.name) for e in entries if _VERSION_NAME.fullmatch(e.name) and e.is_dir()}

    def _manifest(self, version: int) -> str:
        return os.path.join(self.local_base, f".{version}.listing.json")

    def _recorded(self, version: int) -> Listing | None:
        """The listing the local copy of ``version`` was made from, if there is a whole copy."""
        if not os.path.isdir(os.path.join(self.local_base, str(version))):
            return None
        try:
            with open(self._manifest(version), encoding="utf-8") as file:
                recorded = json.load(file)
        except (OSError, ValueError):
            return None
        return {name: (int(size), str(etag)) for name, (size, etag) in recorded.items()}

    def _download(self, version: int, listing: Listing) -> None:
        fs, root = self._open()
        started = time.monotonic()
        staging = tempfile.mkdtemp(prefix=f".{version}{_PARTIAL}", dir=self.local_base)
        try:
            targets = local_targets(staging, listing)
            jobs = []
            for name, target in targets.items():
                os.makedirs(os.path.dirname(target), exist_ok=True)
                jobs.append((f"{root}/{version}/{name}", target))
            what = f"downloading version {version} of {self.url}"
            with self._work.doing(what, len(jobs)) as one_done:

                def fetch(job: tuple[str, str]) -> None:
                    self._work.call(fs, "get_file", *job)
                    one_done()

                pool = concurrent.futures.ThreadPoolExecutor(self._concurrency)
                try:
                    list(pool.map(fetch, jobs))
                finally:  # a failed or cancelled file: the others queued do not start
                    pool.shutdown(cancel_futures=True)
            for name, (size, _etag) in listing.items():
                got = os.path.getsize(targets[name])
                if got != size:
                    raise UnavailableError(
                        f"Downloaded {self.url}/{version}/{name} holds {got} of its {size} bytes"
                    )
            self._install(version, staging, listing)
        except CancelledError:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        except ServingError as failed:
            shutil.rmtree(staging, ignore_errors=True)
            self._report("download_failed", version, error=failed)
            raise
        except Exception as exc:  # noqa: BLE001 - a failed download leaves no copy
            shutil.rmtree(staging, ignore_errors=True)
            error = UnavailableError(
                f"Cannot download version {version} of {self.url}: {type(exc).__name__}: {exc}"
            )
            self._report("download_failed", version, error=error)
            raise error from None
        size = sum(size for size, _ in listing.values())
        took_s = time.monotonic() - started
        _log.info(
            "Downloaded version %d of %s (%d files, %.1f MB) in %.2f s",
            version,
            self.url,
            len(listing),
            size / 1e6,
            took_s,
        )
        self._report("downloaded", version, size, took_s)

    def _report(
        self,
        kind: Literal["downloaded", "listing_failed", "download_failed"],
        version: int | None = None,
        size_bytes: int = 0,
        seconds: float = 0.0,
        *,
        error: ServingError | None = None,
    ) -> None:
        if self._on_event is not None:
            event = StoreEvent(
                self.servable_name, self.url, kind, version, size_bytes, seconds, error
            )
            self._on_event(event)

    def _install(self, version: int, staging: str, listing: Listing) -> None:
        """Renames the complete copy into place (replacing an older one), then records it."""
        target = os.path.join(self.local_base, str(version))
        manifest = self._manifest(version)
        if os.path.exists(manifest):
            os.remove(manifest)  # no record while the copy changes: a crash re-downloads
        if os.path.isdir(target):
            old = tempfile.mkdtemp(prefix=f".{version}{_PARTIAL}old-", dir=self.local_base)
            os.rename(target, os.path.join(old, "v"))
            os.rename(staging, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.rename(staging, target)
        written = f"{manifest}{_PARTIAL}"
        with open(written, "w", encoding="utf-8") as file:
            json.dump({name: list(entry) for name, entry in listing.items()}, file)
        os.replace(written, manifest)

    def _remove(self, version: int) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.remove(self._manifest(version))
        shutil.rmtree(os.path.join(self.local_base, str(version)), ignore_errors=True)
        _log.info("Removed the local copy of version %d of %s", version, self.url)


LISTING_TIMEOUT_S = 60.0
"""The longest one listing of a base path may take; past it, the listing has failed."""


def list_versions(
    url: str,
    storage_options: Mapping[str, Any] | None = None,
    timeout_s: float = LISTING_TIMEOUT_S,
) -> dict[int, Listing]:
    """Each version under the remote base path ``url`` with its files, as one listing sees them.

    Complete or not, refused or not: what is there now (say, to tell which
    platform a model is).  Raises UnavailableError when the store cannot
    be listed within ``timeout_s``; InvalidArgumentError when its store is
    not installed.
    """
    url = url.rstrip("/")
    fs, root = open_store(url, storage_options)
    try:
        found = StoreWork().call(fs, "find", root, detail=True, timeout_s=timeout_s)
    except Exception as exc:  # noqa: BLE001 - any store error: say which and why
        raise UnavailableError(f"Cannot list {url}: {type(exc).__name__}: {exc}") from None
    return _version_listings(found, root)


def _version_listings(found: Mapping[str, Mapping[str, Any]], root: str) -> dict[int, Listing]:
    """fsspec's ``find(root, detail=True)`` as version → its files (directory markers left out)."""
    listings: dict[int, dict[str, tuple[int, str]]] = {}
    prefix = root.rstrip("/") + "/"
    for path, info in found.items():
        relative = path[len(prefix) :] if path.startswith(prefix) else None
        if not relative or info.get("type") == "directory":
            continue
        version_name, sep, inner = relative.partition("/")
        if not sep or not inner or not _VERSION_NAME.fullmatch(version_name):
            continue
        size = int(info.get("size") or 0)
        if is_directory_marker(inner, size):
            continue
        etag = str(info.get("ETag") or info.get("etag") or info.get("md5Hash") or "")
        listings.setdefault(int(version_name), {})[inner] = (size, etag)
    return dict(listings)


def _remove_partials(base: str) -> None:
    """What an interrupted download or swap left behind (never a whole version)."""
    with os.scandir(base) as entries:
        for entry in entries:
            if _PARTIAL in entry.name:
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    os.remove(entry.path)
