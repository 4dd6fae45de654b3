"""RequestLogger: samples requests per model and writes them, off the request path.

TF Serving's request logging (``logging_config`` in ``models.config``):
each model's ``sampling_rate`` picks the requests logged, and its
``log_collector_config`` the sink.  The request path only draws the
sample and puts the request's parts on a bounded queue; one writer thread
builds each ``PredictionLog`` and hands it to its sink.  When the queue is
full the record is dropped and counted, never waited for.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
from collections.abc import Callable, Mapping
from typing import Any, Final, cast, final

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

_STOP = object()

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
        self._queue: queue.Queue[_Item | object] = queue.Queue(max_queued)
        self._sample = sample
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str], int] = {}  # (model, outcome); guarded by: _lock
        self._thread: threading.Thread | None = None  # guarded by: _lock
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
        if self._closed:
            self._count(model_name, DROPPED)
            return
        try:
            self._queue.put_nowait((config, model_name, kind, args))
        except queue.Full:
            self._count(model_name, DROPPED)

    def counts(self) -> dict[tuple[str, str], int]:
        """Sampled requests by (model, outcome): LOGGED, DROPPED, FAILED or NO_SINK."""
        with self._lock:
            return dict(self._counts)

    def drain(self) -> None:
        """Waits until every request queued so far is written and its sink flushed."""
        if self._thread is not None:
            self._queue.join()

    def close(self) -> None:
        """Writes what is queued, closes every sink, stops the writer.  Later requests: dropped."""
        with self._lock:
            self._closed = True
            thread = self._thread
        if thread is not None:
            self._queue.put(_STOP)
            thread.join()

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
            item = self._queue.get()
            if item is _STOP:
                self._close_sinks()
                self._queue.task_done()
                return
            config, model_name, kind, args = cast("_Item", item)
            self._count(model_name, self._write(prediction_records, config, kind, args))
            if self._queue.empty():
                self._flush_sinks()
            self._queue.task_done()

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
