"""RequestLogger: samples requests per model and writes them, off the request path."""

from __future__ import annotations

import collections
import logging
import random
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Final, final

import attrs
import numpy as np

from servinglib.request_extras import request_extras
from servinglib.server.logging_config import FILE_COLLECTOR, LoggingConfig
from servinglib.server.observe.call_record import CallRecord
from servinglib.server.observe.log_sink import (
    FileLogSink,
    FileRetention,
    FileRotation,
    LogSink,
    LogSinkFactory,
)
from servinglib.server.observe.request_context import request_id

_log = logging.getLogger(__name__)

DEFAULT_MAX_QUEUED: Final = 10_000
"""Requests waiting to be written, at most, before further ones are dropped."""

DEFAULT_MAX_QUEUED_BYTES: Final = 256 << 20
"""The estimated size of the requests waiting to be written, at most (256 MiB)."""

DROP_WARNING_INTERVAL_S: Final = 60.0
"""Dropped records are reported in one warning line per this interval at most."""

LOGGED = "OK"
DROPPED = "RESOURCE_EXHAUSTED"
FAILED = "INTERNAL"
NO_SINK = "NOT_FOUND"
"""Outcomes of a sampled request (``status_code`` of ``:tensorflow:serving:request_log_count``):
written to its sink; dropped on a full queue; failed in its sink or its record; no sink
registered for its collector type."""

WRITE_INTERVAL_S: Final = 0.05
"""How often the writer takes the queued requests: a record reaches its sink this long after
its request at most (and at once on :meth:`RequestLogger.drain` and ``close``)."""

# (logging config, model name, record kind, record arguments, estimated bytes)
_Item = tuple[LoggingConfig, str, str, tuple[Any, ...], int]

_RECORD_OVERHEAD_BYTES: Final = 512  # the queue's entry and the record's names and specs


@final
@attrs.frozen(kw_only=True)
class RequestLogOptions:
    """Bounds of request logging: the queue waiting for the writer, and the files kept.

    ``max_queued``: requests waiting to be written, at most;
    ``max_queued_bytes``: their estimated size at most (tensors' ``nbytes``,
    examples and messages).  A request past either bound is dropped and
    counted.  ``file_rotation`` and ``file_retention``: of the built-in file sink.
    Immutable, so thread-safe.
    """

    max_queued: int = attrs.field(default=DEFAULT_MAX_QUEUED, validator=attrs.validators.gt(0))
    max_queued_bytes: int = attrs.field(
        default=DEFAULT_MAX_QUEUED_BYTES, validator=attrs.validators.gt(0)
    )
    file_rotation: FileRotation = attrs.field(factory=FileRotation)
    file_retention: FileRetention = attrs.field(factory=FileRetention)


@final
class RequestLogger:
    """Logs the sampled requests of models whose config has a ``logging_config``.

    ``model_config(name)``: the model's current LoggingConfig (None: not
    logged), read at each request.  ``sinks``: collector type → factory of
    the sink for a LoggingConfig; ``"file"`` (also ``""``) is
    :class:`FileLogSink` unless replaced.  One sink is made per (type,
    filename_prefix) and kept until :meth:`close`.  Dropped requests are
    counted per model and warned of at most every :data:`DROP_WARNING_INTERVAL_S`.
    Thread-safe: :meth:`log` may be called from any thread or event loop.
    """

    def __init__(
        self,
        model_config: Callable[[str], LoggingConfig | None],
        options: RequestLogOptions | None = None,
        *,
        sinks: Mapping[str, LogSinkFactory] | None = None,
        sample: Callable[[], float] | None = None,
    ) -> None:
        options = options or RequestLogOptions()
        self._model_config = model_config
        self._factories: dict[str, LogSinkFactory] = {
            FILE_COLLECTOR: FileLogSink.factory(options.file_rotation, options.file_retention)
        }
        self._factories.update(sinks or {})
        self._factories.setdefault("", self._factories[FILE_COLLECTOR])
        # Appended by requests, taken by the writer: deque's append and popleft are atomic.
        self._queued: collections.deque[_Item] = collections.deque()
        self._max_queued = options.max_queued
        self._max_queued_bytes = options.max_queued_bytes
        # A generator of its own: sampling neither draws from nor depends on the application's
        # global random state (a seed the application sets, Hypothesis's checks of it).
        self._sample = sample or random.Random().random
        self._lock = threading.Lock()
        self._queued_bytes = 0  # queued or being written; guarded by: _lock
        self._dropped_unreported = 0  # guarded by: _lock
        self._reported_s = -DROP_WARNING_INTERVAL_S  # last warning, monotonic; guarded by: _lock
        self._idle = threading.Condition(self._lock)  # notified when the writer ends a batch
        self._hurry = threading.Event()  # the writer takes the queue now (drain, close)
        self._counts: dict[tuple[str, str], int] = {}  # (model, outcome); guarded by: _lock
        self._thread: threading.Thread | None = None  # guarded by: _lock
        self._writing = False  # the writer holds a batch; guarded by: _lock
        self._closed = False  # guarded by: _lock
        self._sinks: dict[tuple[str, str], LogSink | None] = {}  # writer thread only

    def sampled(self, model_name: str) -> LoggingConfig | None:
        """The model's LoggingConfig if this request is to be logged (drawn now), else None."""
        config = self._model_config(model_name)
        if config is None or self._sample() >= config.sampling_rate:
            return None
        return config

    def call_finished(self, record: CallRecord) -> None:
        """Queues a successful call, when sampled, as a predict request (a
        :class:`CallObserver`) with its request's id and the parameters its model was given
        (forwarded headers among them, never a credential: see
        :class:`~servinglib.server.header_forwarding.HeaderForwarding`); failures, streams
        and calls whose caller logs them are not."""
        if record.error is not None or record.stream is not None or not record.log_request:
            return
        name = record.model_name
        if (config := self.sampled(name)) is not None:
            extras = request_extras()
            self.log(
                config,
                name,
                "predict",
                name,
                record.version,
                record.signature_name,
                record.inputs,
                record.outputs,
                record.output_filter,
                request_id() or extras.request_id,
                _loggable(extras.parameters),
            )

    def log(self, config: LoggingConfig, model_name: str, kind: str, *args: Any) -> None:  # noqa: ANN401 - the record's parts
        """Queues a sampled request of ``kind`` (predict, classify, regress, multi_inference).

        ``args`` are the arguments of ``<kind>_record`` in
        :mod:`~servinglib.server.observe.prediction_records`; the arrays and
        messages must no longer change.  Never blocks: on a full queue (in records or in bytes)
        the request is dropped and counted (``RESOURCE_EXHAUSTED``).
        """
        if self._thread is None:
            self._start()
        size = _RECORD_OVERHEAD_BYTES + _estimated_bytes(args)
        with self._lock:
            if (
                not self._closed
                and len(self._queued) < self._max_queued
                and self._queued_bytes + size <= self._max_queued_bytes
            ):
                self._queued_bytes += size
                self._queued.append((config, model_name, kind, args, size))
                return
            self._count_locked(model_name, DROPPED)
            self._dropped_unreported += 1
            now = time.monotonic()
            if now - self._reported_s < DROP_WARNING_INTERVAL_S:
                return
            dropped, self._dropped_unreported, self._reported_s = self._dropped_unreported, 0, now
            queued, queued_bytes = len(self._queued), self._queued_bytes
        _log.warning(
            "Request log: %d sampled request(s) dropped since the last warning (the last of "
            "model %s, ~%d bytes): %d requests, ~%d bytes wait to be written, bounds %d requests, "
            "%d bytes; counted in "
            ':tensorflow:serving:request_log_count{status_code="RESOURCE_EXHAUSTED"}',
            dropped,
            model_name,
            size,
            queued,
            queued_bytes,
            self._max_queued,
            self._max_queued_bytes,
        )

    def counts(self) -> dict[tuple[str, str], int]:
        """Sampled requests by (model, outcome): LOGGED, DROPPED, FAILED or NO_SINK."""
        with self._lock:
            return dict(self._counts)

    def drain(self) -> None:
        """Waits until every request queued so far is written and its sink flushed."""
        with self._lock:
            if self._thread is None:
                return
            while self._queued or self._writing:
                self._hurry.set()
                self._idle.wait(WRITE_INTERVAL_S)

    def close(self) -> None:
        """Writes what is queued, closes every sink, stops the writer.  Later requests: dropped."""
        with self._lock:
            self._closed = True
            thread = self._thread
        if thread is not None:
            self._hurry.set()
            thread.join()
        while self._queued:  # queued by a request racing close(), after the last batch
            _, model_name, _, _, size = self._queued.popleft()
            with self._lock:
                self._queued_bytes -= size
                self._count_locked(model_name, DROPPED)

    def _start(self) -> None:
        with self._lock:
            if self._thread is not None or self._closed:
                return
            self._thread = threading.Thread(
                target=self._write_all, name="servinglib-request-log", daemon=True
            )
            self._thread.start()

    def _count_locked(self, model_name: str, outcome: str) -> None:
        key = (model_name, outcome)
        self._counts[key] = self._counts.get(key, 0) + 1

    def _write_all(self) -> None:
        from servinglib.server.observe import prediction_records

        while True:
            self._hurry.wait(WRITE_INTERVAL_S)
            self._hurry.clear()
            with self._lock:
                closed = self._closed
                self._writing = bool(self._queued)
            # Taken after reading _closed: a request queued before close() is written.  One at a
            # time, its bytes freed once written: the queue's bound covers the record in hand.
            batch = len(self._queued)
            for _ in range(batch):
                config, model_name, kind, args, size = self._queued.popleft()
                outcome = self._write(prediction_records, config, kind, args)
                del args
                with self._lock:
                    self._queued_bytes -= size
                    self._count_locked(model_name, outcome)
            if batch:
                self._flush_sinks()
            with self._lock:
                self._writing = False
                self._idle.notify_all()
            if closed:
                self._close_sinks()
                return

    def _write(
        self,
        records: Any,  # noqa: ANN401 - the prediction_records module
        config: LoggingConfig,
        kind: str,
        args: tuple[Any, ...],
    ) -> str:
        sink = self._sink(config)
        if sink is None:
            return NO_SINK
        try:
            sink.write(getattr(records, f"{kind}_record")(*args))
        except Exception:  # noqa: BLE001 - a sink's failure is counted, never the writer's end
            _log.exception("Request log of model %s: the record was not written", args[0])
            return FAILED
        return LOGGED

    def _sink(self, config: LoggingConfig) -> LogSink | None:
        key = (config.collector_type, config.filename_prefix)
        if key in self._sinks:
            return self._sinks[key]
        factory = self._factories.get(config.collector_type)
        sink: LogSink | None = None
        if factory is None:
            _log.error(
                "Request log: no log collector of type %r is registered; its records are "
                "dropped (registered: %s)",
                config.collector_type,
                ", ".join(sorted(t for t in self._factories if t)),
            )
        else:
            try:
                sink = factory(config)
            except Exception:  # noqa: BLE001 - a broken sink factory: its records are counted
                _log.exception(
                    "Request log: the %r collector failed to start", config.collector_type
                )
        self._sinks[key] = sink
        return sink

    def _flush_sinks(self) -> None:
        for sink in self._sinks.values():
            if sink is not None:
                try:
                    sink.flush()
                except Exception:  # noqa: BLE001 - one sink's failure stops no other
                    _log.exception("Request log: a sink failed to flush")

    def _close_sinks(self) -> None:
        for sink in self._sinks.values():
            if sink is not None:
                try:
                    sink.close()
                except Exception:  # noqa: BLE001 - one sink's failure stops no other
                    _log.exception("Request log: a sink failed to close")


CREDENTIAL_NAMES: Final = frozenset(
    {"authorization", "proxy-authorization", "cookie", "x-api-key", "api-key"}
)
"""Parameter names never logged, whatever their value: the usual credential headers, which a
forward pattern such as ``.*`` hands the model when no restricted API group withholds them
(those of restricted groups are never forwarded at all)."""


def _loggable(parameters: Mapping[str, Any]) -> Mapping[str, Any]:
    """``parameters`` without those named as credentials (the same mapping when none is)."""
    if not any(name.lower() in CREDENTIAL_NAMES for name in parameters):
        return parameters
    return {k: v for k, v in parameters.items() if k.lower() not in CREDENTIAL_NAMES}


def _estimated_bytes(args: tuple[Any, ...]) -> int:
    """What holding a record's ``args`` costs, about: their arrays, bytes and messages.

    Runs on the request path: exact types are tried first (an ABC check costs
    a microsecond), and nested values are walked without recursion.
    """
    total = 0
    pending = list(args)
    while pending:
        value = pending.pop()
        kind = type(value)
        if kind is np.ndarray:
            total += value.nbytes
        elif kind is bytes or kind is str:
            total += len(value)
        elif kind is dict:
            pending.extend(value.values())
        elif kind is list or kind is tuple:
            pending.extend(value)
        elif value is None or kind is int or kind is float:
            total += 8
        else:
            total += _other_bytes(value, pending)
    return total


def _other_bytes(value: object, pending: list[Any]) -> int:
    """The bytes of a value of a rarer type; a container's items are added to ``pending``."""
    if isinstance(value, (bytes, bytearray, memoryview, str)):
        return len(value)
    if isinstance(value, Mapping):
        pending.extend(value.values())
        return 0
    if isinstance(value, (list, tuple)):
        pending.extend(value)
        return 0
    byte_size = getattr(value, "ByteSize", None)
    if callable(byte_size):  # a protobuf message
        return int(byte_size())
    nbytes = getattr(value, "nbytes", None)  # an array of another kind, a numpy scalar
    return nbytes if isinstance(nbytes, int) else 8
