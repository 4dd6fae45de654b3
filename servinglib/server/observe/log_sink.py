"""Where logged requests go: the LogSink interface, and the built-in TFRecord file sink."""

from __future__ import annotations

import abc
import collections
import logging
import os
import time
from collections.abc import Callable
from typing import IO, final

import attrs

from servinglib.server.logging_config import LoggingConfig

_log = logging.getLogger(__name__)


class LogSink(abc.ABC):
    """Receives a model's logged requests, as serialized ``PredictionLog`` records.

    Important: :meth:`write` may block (the writer thread waits, requests do
    not) but should not raise; an exception is logged and the record counted
    as dropped.
    Thread safety: called from one writer thread only; need not be thread-safe.
    """

    @abc.abstractmethod
    def write(self, record: bytes) -> None:
        """Takes one serialized ``PredictionLog``."""

    def flush(self) -> None:  # noqa: B027 - optional: sinks without buffers need nothing
        """Makes the records written so far durable (called when the queue runs empty)."""

    def close(self) -> None:  # noqa: B027 - optional: sinks without resources need nothing
        """Flushes and releases the sink; no write follows."""


LogSinkFactory = Callable[[LoggingConfig], LogSink]
"""Makes the sink of one model's ``LoggingConfig`` (registered per collector type)."""


@final
@attrs.frozen(kw_only=True)
class FileRotation:
    """When the file sink starts a new file: past ``max_bytes`` or ``max_age_s``.  Immutable."""

    max_bytes: int = attrs.field(default=64 << 20, validator=attrs.validators.gt(0))
    max_age_s: float = attrs.field(default=3600.0, validator=attrs.validators.gt(0))


@final
@attrs.frozen(kw_only=True)
class FileRetention:
    """Which of its files the file sink keeps: the newest ``max_files``, in ``max_total_bytes``.

    Both count the file being written.  That file is never deleted, so
    ``max_total_bytes`` bounds the disk used when it is at least
    :class:`FileRotation`'s ``max_bytes`` plus one record.  Immutable.
    """

    max_files: int = attrs.field(default=100, validator=attrs.validators.gt(0))
    max_total_bytes: int = attrs.field(default=1 << 30, validator=attrs.validators.gt(0))


@final
class FileLogSink(LogSink):
    """Writes records to TFRecord files ``<filename_prefix>.<start time ns>.tfrecord``.

    A file is opened at the first record and closed (a new one started at
    the next record) once it holds ``rotation.max_bytes`` or is
    ``rotation.max_age_s`` old.  Past ``retention``, the oldest files this
    sink wrote are deleted (files it did not write, such as those of an
    earlier process, are left alone).  The prefix's directory is created if
    missing.  Every file, closed or being written and flushed, is a valid
    TFRecord file of ``PredictionLog`` records.
    Not thread-safe: one writer thread.
    """

    def __init__(
        self,
        filename_prefix: str,
        rotation: FileRotation | None = None,
        retention: FileRetention | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._prefix = filename_prefix
        self._rotation = rotation or FileRotation()
        self._retention = retention or FileRetention()
        self._clock = clock
        self._file: IO[bytes] | None = None
        self._path = ""
        self._opened_s = 0.0
        self._bytes = 0
        self._frame: Callable[[bytes], bytes] = bytes
        self._closed: collections.deque[tuple[str, int]] = collections.deque()  # oldest first
        self._closed_bytes = 0

    @classmethod
    def factory(
        cls, rotation: FileRotation | None = None, retention: FileRetention | None = None
    ) -> LogSinkFactory:
        """A factory making a file sink per model config, with ``rotation`` and ``retention``."""
        return lambda config: cls(config.filename_prefix, rotation, retention)

    @property
    def paths(self) -> list[str]:
        """The files this sink wrote and keeps, oldest first (the one being written last)."""
        paths = [path for path, _ in self._closed]
        return [*paths, self._path] if self._file is not None else paths

    def write(self, record: bytes) -> None:
        """Appends ``record`` to the current file, first rotating if it is full or old."""
        now = self._clock()
        file = self._file
        if file is not None and (
            self._bytes >= self._rotation.max_bytes
            or now - self._opened_s >= self._rotation.max_age_s
        ):
            self.close()
            file = None
        if file is None:
            file = self._open(now)
        framed = self._frame(record)
        file.write(framed)
        self._bytes += len(framed)
        self._delete_oldest()

    def flush(self) -> None:
        """Flushes the current file to the operating system."""
        if self._file is not None:
            self._file.flush()

    def close(self) -> None:
        """Closes the current file."""
        if self._file is not None:
            self._file.close()
            self._file = None
            self._closed.append((self._path, self._bytes))
            self._closed_bytes += self._bytes

    def _open(self, now: float) -> IO[bytes]:
        from servinglib.codecs.tfrecord import framed_record  # codecs import protobuf

        self._frame = framed_record
        directory = os.path.dirname(self._prefix)
        if directory:
            os.makedirs(directory, exist_ok=True)
        stamp = int(now * 1e9)
        path = f"{self._prefix}.{stamp}.tfrecord"
        while os.path.exists(path):  # two files within one clock tick
            stamp += 1
            path = f"{self._prefix}.{stamp}.tfrecord"
        self._file = open(path, "xb")  # noqa: SIM115 - kept open across writes
        self._path = path
        self._opened_s = now
        self._bytes = 0
        return self._file

    def _delete_oldest(self) -> None:
        """Deletes closed files, oldest first, until the files kept are within the retention."""
        retention = self._retention
        while self._closed and (
            len(self._closed) + 1 > retention.max_files
            or self._closed_bytes + self._bytes > retention.max_total_bytes
        ):
            path, size = self._closed.popleft()
            self._closed_bytes -= size
            try:
                os.remove(path)
            except FileNotFoundError:
                pass  # removed by someone else: what retention wanted
            except OSError as error:
                _log.warning("Request log: could not delete %s: %s", path, error)
