"""StreamMetrics: streams by model and outcome, parts per stream, time to first part."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, final

from servinglib.server.observe.call_record import CallRecord, StreamRecord
from servinglib.server.observe.series import STREAMS

if TYPE_CHECKING:
    from servinglib.server.observe.metrics import ServerMetrics

_log = logging.getLogger("servinglib.streams")


@final
class StreamMetrics:
    """The stream metrics of one server.  Thread-safe (prometheus-client's metrics are)."""

    def __init__(self, metrics: ServerMetrics) -> None:
        self._recorded = {key: series.metric(metrics.registry) for key, series in STREAMS.items()}

    def call_finished(self, record: CallRecord) -> None:
        """Records a closed stream among the calls (a :class:`CallObserver`)."""
        if record.stream is not None:
            self.observe(record.stream)

    def observe(self, record: StreamRecord) -> None:
        """Records one closed stream."""
        name, recorded = record.model_name, self._recorded
        recorded["streams"].labels(name, record.code.name).inc()
        recorded["parts"].labels(name).observe(record.parts)
        if record.first_part_s is not None:
            recorded["first_part"].labels(name).observe(record.first_part_s)


def log_stream(record: StreamRecord) -> None:
    """One log line per closed stream (``servinglib.streams``, INFO)."""
    first = "-" if record.first_part_s is None else f"{record.first_part_s * 1e3:.2f} ms"
    _log.info(
        "stream %s v%d %s %s: %d parts, first after %s, %.2f ms in all",
        record.model_name,
        record.version,
        record.signature_name,
        record.code.name,
        record.parts,
        first,
        record.duration_s * 1e3,
    )
