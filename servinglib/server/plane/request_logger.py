"""RequestLogger: samples requests per model and writes them, off the request path.

TF Serving's request logging (``logging_config`` in ``models.config``):
each model's ``sampling_rate`` picks the requests logged, and its
``log_collector_config`` the sink.  The request path only draws the
sample and appends the request's parts to a bounded queue (a deque: no
lock, no thread woken); one writer thread takes what has queued every
:data:`WRITE_INTERVAL_S`, builds each ``PredictionLog``, hands it to its
sink and flushes each sink once per batch.  When the queue is full the
record is dropped and counted, never waited for.
"""

from __future__ import annotations

import collections
import logging
import random
import threading
from collections.abc import Callable, Mapping
from typing import Any, Final, final

from servinglib.server.logging_config import FILE_COLLECTOR, LoggingConfig
from servinglib.server.plane.log_sink import FileLogSink, LogSink, LogSinkFactory

_log = logging.getLogger(__name__)

DEFAULT_MAX_QUEUED: Final = 10_000
"""Requests waiting to be written, at most, before further ones are dropped."""

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

# (logging config, model name, record kind, record arguments)
_Item = tuple[LoggingConfig, str, str, tuple[Any, ...]]


@final
class RequestLogger:
    """Logs the sampled requests of models whose config has a ``logging_config``.

    ``model_config(name)``: the model's current LoggingConfig (None: not
    logged); read at each request, so a config reload applies at once.
    ``sinks``: collector type → factory of the sink for a LoggingConfig;
    the ``"file"`` type (also ``""``) is built in (:class:`FileLogSink`) unless
    replaced here.  One sink is made per (type, filename_prefix) and kept
    until :meth:`close`.  The writer thread starts with the first sampled
    request.
    Thread-safe: :meth:`log` may be called from any thread or event loop.
    """

    def __init__(
        self,
        model_config: Callable[[str], LoggingConfig | None],
        *,
        sinks: Mapping[str, LogSinkFactory] | None = None,
        max_queued: int = DEFAULT_MAX_QUEUED,
        sample: Callable[[], float] = random.random,
    ) -> None:
        self._model_config = model_config
        self._factories: dict[str, LogSinkFactory] = {FILE_COLLECTOR: FileLogSink.factory()}
        self._factories.update(sinks or {})
        self._factories.setdefault("", self._factories[FILE_COLLECTOR])
        # Appended by requests, taken by the writer: deque's append and popleft are atomic.
        self._queued: collections.deque[_Item] = collections.deque()
        self._max_queued = max_queued
        self._sample = sample
        self._lock = threading.Lock()
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

    def log(self, config: LoggingConfig, model_name: str, kind: str, *args: Any) -> None:  # noqa: ANN401 - the record's parts
        """Queues a sampled request of ``kind`` (predict, classify, regress, multi_inference).

        ``args`` are the arguments of ``<kind>_record`` in
        :mod:`~servinglib.server.plane.prediction_records`; the arrays and
        messages must no longer change.  Never blocks: on a full queue the request is dropped and
        counted (``RESOURCE_EXHAUSTED``).
        """
        if self._thread is None:
            self._start()
        if self._closed or len(self._queued) >= self._max_queued:
            self._count(model_name, DROPPED)
            return
        self._queued.append((config, model_name, kind, args))

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
            self._count(self._queued.popleft()[1], DROPPED)

    def _start(self) -> None:
        with self._lock:
            if self._thread is not None or self._closed:
                return
            self._thread = threading.Thread(
                target=self._write_all, name="servinglib-request-log", daemon=True
            )
            self._thread.start()

    def _count(self, model_name: str, outcome: str) -> None:
        with self._lock:
            key = (model_name, outcome)
            self._counts[key] = self._counts.get(key, 0) + 1

    def _write_all(self) -> None:
        from servinglib.server.plane import prediction_records

        while True:
            self._hurry.wait(WRITE_INTERVAL_S)
            self._hurry.clear()
            with self._lock:
                closed = self._closed
                self._writing = bool(self._queued)
            # Taken after reading _closed: a request queued before close() is written.
            batch = [self._queued.popleft() for _ in range(len(self._queued))]
            for config, model_name, kind, args in batch:
                self._count(model_name, self._write(prediction_records, config, kind, args))
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
