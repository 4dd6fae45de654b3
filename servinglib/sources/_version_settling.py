"""When a version directory is complete and quiet: fingerprints and the settle window."""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Mapping

import attrs

from servinglib.sources.version_check import VersionCheck

_log = logging.getLogger("servinglib.sources.file_system_storage_path_source")

Fingerprint = Mapping[str, tuple[int, int]]
"""Relative file path → (size, mtime in ns): what a poll sees of a version directory."""

RESTLESS_REPORT_S = 30.0
"""A version whose files are still changing this long after the change began is reported."""


@attrs.define
class _Seen:
    """What the source knows of one version directory.  Guarded by the source's poll lock."""

    fingerprint: Fingerprint
    changed_at: float  # clock time the fingerprint last changed (-inf: quiet since first seen)
    restless_since: float | None = None  # clock time the current run of changes began
    offered: Fingerprint | None = None  # the fingerprint last offered; None: not offered yet
    revision: int = 0
    waiting_logged: bool = False
    restless_logged: bool = False


@attrs.frozen
class Verdict:
    """One look at a version: offer it (with its revision), and when to look again."""

    offered: bool
    revision: int
    recheck_at: float | None = None  # clock time the settle window ends, if it is running


class VersionSettling:
    """Decides, per version directory, when its files are complete and quiet.

    A version is offered once its platform's check passes and no file under
    it changed (names, sizes, mtimes) for ``settle_window_s`` (on first sight:
    its files' newest ctime is that old).  An offered version stays offered;
    when its files change and settle again it is offered again with the next
    revision (a failed load then heals).
    Not thread-safe: the source calls it under its poll lock.
    """

    def __init__(self, settle_window_s: float) -> None:
        self._settle_window_s = settle_window_s
        # base path → version directory → what is known of it
        self._seen: dict[str, dict[str, _Seen]] = {}

    def look(
        self,
        label: str,
        path: str,
        now: float,
        check: VersionCheck | None,
        *,
        done: bool,
    ) -> Verdict:
        """Looks at version directory ``path`` (``label`` names it in the log) at clock ``now``.

        ``done``: the writer said so (a done marker) or the caller polls by
        hand: no settle window.
        """
        fingerprint, newest = _fingerprint(path)
        versions = self._seen.setdefault(os.path.dirname(path), {})
        seen = versions.get(path)
        if seen is None:
            quiet = time.time() - newest >= self._settle_window_s
            seen = _Seen(fingerprint, -math.inf if quiet else now)
            versions[path] = seen
        elif fingerprint != seen.fingerprint:
            changed = _changed_file(seen.fingerprint, fingerprint)
            seen.fingerprint, seen.changed_at = fingerprint, now
            if seen.restless_since is None:
                seen.restless_since = now
            self._report_restless(label, seen, now, changed)
        settled = done or now - seen.changed_at >= self._settle_window_s
        if seen.offered is not None and seen.offered == fingerprint:
            self._settled(label, seen)
            return Verdict(True, seen.revision)
        # A directory the server may not read is left to the loader, which says so.
        readable = os.access(path, os.R_OK | os.X_OK)
        reason = check(path) if check is not None and readable else None
        if reason is None and settled:
            if seen.offered is not None:
                seen.revision += 1
                _log.info(
                    "%s changed and settled: offered again (revision %d)", label, seen.revision
                )
            seen.offered = fingerprint
            self._settled(label, seen)
            return Verdict(True, seen.revision)
        if seen.offered is None and not seen.waiting_logged:
            seen.waiting_logged = True
            why = reason if reason is not None else "its files changed just now"
            _log.info("%s seen; waiting for its files to settle (%s)", label, why)
        recheck = None if reason is not None or done else seen.changed_at + self._settle_window_s
        return Verdict(seen.offered is not None, seen.revision, recheck)

    def offered_revisions(self, base: str) -> dict[str, int]:
        """Version directory → the revision it was last offered with, for those under ``base``
        offered before."""
        versions = self._seen.get(_key(base), {})
        return {path: seen.revision for path, seen in versions.items() if seen.offered is not None}

    def forget_others(self, base: str, present: set[str]) -> None:
        """Forgets the version directories under ``base`` not in ``present``."""
        versions = self._seen.get(_key(base), {})
        for path in [p for p in versions if p not in present]:
            if versions.pop(path).offered is None:
                _log.info("%s went away before it was complete; dropped", path)

    def forget(self, base: str) -> None:
        """Forgets every version directory under ``base``."""
        self.forget_others(base, set())
        self._seen.pop(_key(base), None)

    def _report_restless(self, label: str, seen: _Seen, now: float, changed: str) -> None:
        assert seen.restless_since is not None
        if seen.restless_logged or now - seen.restless_since < RESTLESS_REPORT_S:
            return
        seen.restless_logged = True
        _log.warning(
            "%s: its files keep changing (%s, for %.0f s); it is %s until they are quiet for %g s",
            label,
            changed,
            now - seen.restless_since,
            "not offered again" if seen.offered is not None else "not offered",
            self._settle_window_s,
        )

    def _settled(self, label: str, seen: _Seen) -> None:
        if seen.restless_logged:
            _log.info("%s: its files are quiet again", label)
        seen.restless_since, seen.restless_logged = None, False


def _key(base: str) -> str:
    """The key of ``base``'s versions: what os.path.dirname gives for each of their paths."""
    return os.path.dirname(os.path.join(base, "version"))


def _fingerprint(path: str) -> tuple[Fingerprint, float]:
    """Every file under ``path`` with its size and mtime, and the newest ctime/mtime seen."""
    found: dict[str, tuple[int, int]] = {}
    newest = 0.0
    pending = [("", path)]
    while pending:
        prefix, directory = pending.pop()
        try:
            with os.scandir(directory) as entries:
                listed = list(entries)
        except OSError:  # gone while walking: the next look sees the rest of the change
            continue
        for entry in listed:
            try:
                info = entry.stat()
                is_dir = entry.is_dir()
            except OSError:
                continue
            newest = max(newest, info.st_ctime, info.st_mtime)
            if is_dir:
                pending.append((f"{prefix}{entry.name}{os.sep}", entry.path))
            else:
                found[prefix + entry.name] = (info.st_size, info.st_mtime_ns)
    return found, newest


def _changed_file(before: Fingerprint, after: Fingerprint) -> str:
    """A file that differs between two fingerprints (for the log)."""
    for name in sorted(before.keys() | after.keys()):
        if before.get(name) != after.get(name):
            return name
    return "?"
