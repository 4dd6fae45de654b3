"""StreamMetrics: streams by model and outcome, parts per stream, time to first part.

Registered in a :class:`~servinglib.server.observe.metrics.ServerMetrics`'
registry (so ``--num_workers`` sums them like the rest), under servinglib's
own names, in seconds.  Feed it with :meth:`StreamMetrics.observe` as the
DataPlane's ``on_stream``; :func:`log_stream` writes a stream's log line.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Final, final

from servinglib.server.observe.call_record import CallRecord, StreamRecord

if TYPE_CHECKING:
    from servinglib.server.observe.metrics import ServerMetrics

_PARTS_BUCKETS: Final = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000)
_FIRST_PART_S_BUCKETS: Final = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30,
)  # fmt: skip

_log = logging.getLogger("servinglib.streams")


@final
class StreamMetrics:
    """The stream metrics of one server.  Thread-safe (prometheus-client's metrics are)."""

    def __init__(self, metrics: ServerMetrics) -> None:
        import prometheus_client as prom  # ServerMetrics exists: the metrics extra is installed

        registry = metrics.registry
        self._streams = prom.Counter(
            "servinglib_streams",
            "Streamed answers (gRPC ModelStreamInfer, REST generate and generate_stream) ended, "
            "by model and outcome (OK, CANCELLED when the client left, or the error's code).",
            ["model_name", "outcome"],
            registry=registry,
        )
        self._parts = prom.Histogram(
            "servinglib_stream_parts",
            "Parts each stream handed to its client.",
            ["model_name"],
            buckets=_PARTS_BUCKETS,
            registry=registry,
        )
        self._first_part = prom.Histogram(
            "servinglib_stream_first_part_seconds",
            "Time from a stream's start to its first part, in seconds.",
            ["model_name"],
            buckets=_FIRST_PART_S_BUCKETS,
            registry=registry,
        )

    def call_finished(self, record: CallRecord) -> None:
        """Records a closed stream among the calls (a :class:`CallObserver`)."""
        if record.stream is not None:
            self.observe(record.stream)

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
