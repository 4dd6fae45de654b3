"""StreamMetrics: streams by model and outcome, parts per stream, time to first part.

Registered in a :class:`~servinglib.server.observe.metrics.ServerMetrics`'
registry (so ``--num_workers`` sums them like the rest), under servinglib's
own names, in seconds.  Feed it with :meth:`StreamMetrics.observe` as the
DataPlane's ``on_stream``; :func:`log_stream` writes a stream's log line.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, final

from servinglib.server.observe.call_record import StreamRecord
from servinglib.server.observe.series import STREAMS

if TYPE_CHECKING:
    from servinglib.server.observe.metrics import ServerMetrics

_log = logging.getLogger("servinglib.streams")


@final
class StreamMetrics:
    """The stream metrics of one server.  Thread-safe (prometheus-client's metrics are)."""

    def __init__(self, metrics: ServerMetrics) -> None:
        import prometheus_client as prom  # ServerMetrics exists: the metrics extra is installed

        recorded = {key: series.metric(prom, metrics.registry) for key, series in STREAMS.items()}
        self._streams, self._parts = recorded["streams"], recorded["parts"]
        self._first_part = recorded["first_part"]

    def observe(self, record: StreamRecord) -> None:
        """Records one closed stream."""
        name = record.model_name
        self._streams.labels(name, record.code.name).inc()
        self._parts.labels(name).observe(record.parts)
        if record.first_part_s is not None:
            self._first_part.labels(name).observe(record.first_part_s)


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
