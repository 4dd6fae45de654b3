"""StreamMetrics: streams by model and outcome, parts per stream, time to first part."""

from __future__ import annotations

import logging

import pytest

from servinglib.errors import StatusCode
from servinglib.server.observe.call_record import StreamRecord
from servinglib.server.observe.metrics import ServerMetrics
from servinglib.server.observe.stream_metrics import StreamMetrics, log_stream


def record(code: StatusCode, parts: int, first_part_s: float | None) -> StreamRecord:
    return StreamRecord(
        model_name="m",
        version=1,
        signature_name="serving_default",
        code=code,
        parts=parts,
        first_part_s=first_part_s,
        duration_s=0.5,
    )


def test_streams_are_counted_by_outcome_with_parts_and_first_part_time() -> None:
    """Two streams (one OK, one cancelled before a part): counts, parts and first-part times."""
    metrics = ServerMetrics()
    streams = StreamMetrics(metrics)
    streams.observe(record(StatusCode.OK, 100, 0.002))
    streams.observe(record(StatusCode.CANCELLED, 0, None))
    text = metrics.render().decode()
    assert 'servinglib_streams_total{model_name="m",outcome="OK"} 1.0' in text
    assert 'servinglib_streams_total{model_name="m",outcome="CANCELLED"} 1.0' in text
    assert 'servinglib_stream_parts_sum{model_name="m"} 100.0' in text
    assert 'servinglib_stream_parts_count{model_name="m"} 2.0' in text
    assert 'servinglib_stream_first_part_seconds_count{model_name="m"} 1.0' in text


def test_log_stream_writes_one_line(caplog: pytest.LogCaptureFixture) -> None:
    """The request log's line for a stream names model, outcome, parts and timing."""
    with caplog.at_level(logging.INFO, "servinglib.streams"):
        log_stream(record(StatusCode.DEADLINE_EXCEEDED, 3, 0.0015))
    assert caplog.messages == [
        "stream m v1 serving_default DEADLINE_EXCEEDED: 3 parts, first after 1.50 ms, "
        "500.00 ms in all"
    ]
