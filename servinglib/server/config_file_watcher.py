"""ModelConfigFileWatcher: applies edits of the model config file while the server runs."""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from typing import TypeAlias, final

import attrs

from servinglib.core.clock import Clock, SystemClock, Timer
from servinglib.core.wake_loop import WakeLoop
from servinglib.errors import InvalidArgumentError, ServingError
from servinglib.server.config import ModelServerConfig, read_model_server_config
from servinglib.server.server_core import ServerCore
from servinglib.sources.fs_event_trigger import FsEventTrigger

_log = logging.getLogger(__name__)

Compose: TypeAlias = Callable[[ModelServerConfig, ModelServerConfig], ModelServerConfig]
"""``compose(file's config, served config)`` → the config to serve."""


@final
@attrs.frozen
class ConfigFileStatus:
    """The last outcome of reading the config file, for status pages and health checks.

    ``error`` is None when the last version of the file read was applied;
    otherwise the server keeps serving the config applied before.
    ``unavailable``: models of the applied config that did not become
    available, with why (they stay configured and load once they can).
    ``applied_at_s`` / ``checked_at_s``: ``time.time()`` of the last apply / read.
    Immutable, so thread-safe.
    """

    path: str
    error: ServingError | None
    applied_at_s: float | None
    checked_at_s: float | None
    unavailable: Mapping[str, ServingError] = attrs.field(factory=dict)


@final
class ModelConfigFileWatcher:
    """Re-reads a model config file and reloads the ServerCore when its content changes.

    Requires: the core serves the file's content at construction.
    Checks every ``poll_wait_seconds`` and, with ``watch_filesystem_events``,
    the moment anything in the file's directory changes.  A file that cannot
    be read or parsed is read again once its content stayed the same for
    ``settle_s``; a file still bad then, or one that fails to validate, is
    reported by :meth:`status` and the log, changes nothing, and is not
    retried until it changes.  A config applied whose new models did not
    become available stays applied; ``status().unavailable`` names them.
    ``compose(file's config, served config)`` makes the config to serve when
    the file is not all of it (beside a model repository's models); default:
    the file's.
    Thread-safe.
    """

    def __init__(
        self,
        core: ServerCore,
        path: str,
        poll_wait_seconds: float,
        *,
        watch_filesystem_events: bool = True,
        settle_s: float = 0.5,
        clock: Clock | None = None,
        compose: Compose | None = None,
    ) -> None:
        if poll_wait_seconds <= 0:
            raise InvalidArgumentError("poll_wait_seconds must be > 0 (0 means: do not watch)")
        if settle_s < 0:
            raise InvalidArgumentError(f"settle_s must be >= 0, got {settle_s}")
        self._core = core
        self._path = os.path.abspath(path)
        self._directory = os.path.dirname(self._path)
        self._poll_wait_s = poll_wait_seconds
        self._settle_s = settle_s
        self._compose = compose
        self._clock = clock if clock is not None else SystemClock()
        self._check_lock = threading.Lock()  # serializes checks
        self._lock = threading.Lock()
        # The core is taken to serve the file as it is now (it was built from it).
        self._last_digest: bytes | None = _digest_of(self._path)  # guarded by: _check_lock
        self._status = ConfigFileStatus(self._path, None, None, None)  # replaced whole
        # A bad content (digest; None: unreadable) first seen at this clock time, not yet reported.
        self._unsettled: tuple[bytes | None, float] | None = None  # guarded by: _check_lock
        self._timer: Timer | None = None  # guarded by: _lock
        self._settle_timer: Timer | None = None  # guarded by: _lock
        self._stop = threading.Event()
        self._events = FsEventTrigger(self._on_fs_event, include_modifications=True)
        self._loop = WakeLoop(
            "servinglib-config-watcher", self._check, what=f"checking model config file {path}"
        )
        self._loop.start()
        if watch_filesystem_events:
            # Editors replace files by renaming: watch the directory, not the file.
            self._events.watch_exactly([self._directory], recursive=False)
        self._schedule()

    @property
    def path(self) -> str:
        """The config file watched."""
        return self._path

    def status(self) -> ConfigFileStatus:
        """The outcome of the last check."""
        return self._status

    def check_once(self) -> bool:
        """Reads the file now; reloads the core if its content changed.  True if applied.

        A file unreadable or unparsable for the first time is not reported
        yet: a re-check is scheduled ``settle_s`` later.
        """
        with self._check_lock:
            now = time.time()
            try:
                with open(self._path, "rb") as file:
                    content = file.read()
            except OSError as exc:
                if self._settled_locked(None):
                    self._last_digest = None  # once readable again, it is applied and said so
                    self._record(InvalidArgumentError(f"Cannot read {self._path}: {exc}"), now)
                return False
            digest = hashlib.sha256(content).digest()
            if digest == self._last_digest:
                self._unsettled = None
                self._status = attrs.evolve(self._status, checked_at_s=now)
                return False
            try:
                # The bytes just hashed, not a second read that could see another write.
                config = read_model_server_config(self._path, content=content)
            except ServingError as error:
                if self._settled_locked(digest):
                    self._last_digest = digest
                    self._record(error, now)
                return False
            self._unsettled = None
            self._last_digest = digest
            return self._apply(config, now)

    def _apply(self, config: ModelServerConfig, now: float) -> bool:
        before = self._core.config
        compose = self._compose
        try:
            if compose is None:
                self._core.reload_config(config)
            else:
                self._core.update_config(lambda served: compose(config, served))
        except ServingError as error:
            if self._core.config is before:  # rejected whole: the previous config serves
                self._record(error, now)
                return False
            # Applied; some new models did not become available (they stay configured).
            failed = self._core.failed_models()
            unavailable = {name: failed[name] for name in config.names if name in failed}
            listed = ", ".join(f"{n} ({e.message})" for n, e in unavailable.items())
            self._status = ConfigFileStatus(self._path, None, now, now, unavailable)
            _log.warning(
                "applied model config file %s; not available yet: %s",
                self._path,
                listed or error.message,
            )
            return True
        self._status = ConfigFileStatus(self._path, None, now, now)
        _log.info("applied model config file %s", self._path)
        return True

    def _settled_locked(self, digest: bytes | None) -> bool:
        """Whether a bad content has stayed the same for ``settle_s`` (else: look again then)."""
        now = self._clock.now()
        if self._unsettled is None or self._unsettled[0] != digest:
            if self._settle_s == 0:
                return True
            self._unsettled = (digest, now)
            remaining = self._settle_s
            _log.debug(
                "model config file %s is unreadable or unfinished; reading it again in %g s",
                self._path,
                remaining,
            )
        else:
            remaining = self._unsettled[1] + self._settle_s - now
            if remaining <= 0:
                return True
        with self._lock:
            if self._settle_timer is not None:
                self._settle_timer.cancel()
            if not self._stop.is_set():
                self._settle_timer = self._clock.call_later(remaining, self._loop.wake)
        return False

    def close(self) -> None:
        """Stops watching; idempotent."""
        self._stop.set()
        with self._lock:
            timers = (self._timer, self._settle_timer)
            self._timer = self._settle_timer = None
        for timer in timers:
            if timer is not None:
                timer.cancel()
        self._loop.stop()
        self._events.close()

    def __enter__(self) -> ModelConfigFileWatcher:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _record(self, error: ServingError, now: float) -> None:
        if error != self._status.error:  # said when it begins, not at every check
            _log.error("model config file %s not applied: %s", self._path, error.message)
        self._status = attrs.evolve(self._status, error=error, checked_at_s=now)

    def _schedule(self) -> None:
        with self._lock:
            if not self._stop.is_set():
                self._timer = self._clock.call_later(self._poll_wait_s, self._on_timer)

    def _on_timer(self) -> None:
        self._loop.wake()
        self._schedule()

    def _on_fs_event(self, path: str) -> None:
        # Any entry of the file's directory, not only the file: a Kubernetes ConfigMap volume
        # changes the file by renaming a `..data` symlink beside it (the file is a symlink
        # through it), so no event names the file. The digest tells whether it changed.
        if os.path.dirname(os.path.abspath(path)) == self._directory:
            self._loop.wake()

    def _check(self) -> None:
        """The watcher thread's step: one check (the loop logs a failure and goes on)."""
        self.check_once()


def _digest_of(path: str) -> bytes | None:
    try:
        with open(path, "rb") as file:
            return hashlib.sha256(file.read()).digest()
    except OSError:
        return None
