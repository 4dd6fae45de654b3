"""WorkerMetrics: registries summed through the shared directory, monotonic over restarts."""

from __future__ import annotations

from pathlib import Path

import prometheus_client
from prometheus_client.parser import text_string_to_metric_families

from servinglib.server.observe.worker_metrics import WorkerMetrics, forget_gauges


def registry_with(requests: float, in_flight: float) -> prometheus_client.CollectorRegistry:
    registry = prometheus_client.CollectorRegistry()
    counter = prometheus_client.Counter("requests", "Requests.", ["model"], registry=registry)
    counter.labels("m").inc(requests)
    histogram = prometheus_client.Histogram(
        "latency", "Latency.", buckets=(1, 10), registry=registry
    )
    for _ in range(int(requests)):
        histogram.observe(5)
    gauge = prometheus_client.Gauge("in_flight", "In flight.", registry=registry)
    gauge.set(in_flight)
    return registry


def samples(text: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text.decode())
        for sample in family.samples
    }


def test_counters_and_histograms_sum_and_gauges_are_per_worker(tmp_path: Path) -> None:
    """A render sums counters and histogram buckets over workers and labels gauges by worker."""
    first = WorkerMetrics(registry_with(3, 1), tmp_path, 0)
    second = WorkerMetrics(registry_with(4, 2), tmp_path, 1)
    try:
        second.publish()
        scraped = samples(first.render())
    finally:
        first.close()
        second.close()
    assert scraped["requests_total", (("model", "m"),)] == 7
    assert scraped["latency_bucket", (("le", "1.0"),)] == 0
    assert scraped["latency_bucket", (("le", "10.0"),)] == 7
    assert scraped["latency_count", ()] == 7
    assert scraped["latency_sum", ()] == 35
    assert scraped["in_flight", (("worker", "0"),)] == 1
    assert scraped["in_flight", (("worker", "1"),)] == 2


def test_a_worker_replacing_one_that_exited_carries_its_counts(tmp_path: Path) -> None:
    """Counts never go down when a worker is replaced; the gauges of the one that exited go."""
    WorkerMetrics(registry_with(5, 3), tmp_path, 0).close()
    forget_gauges(tmp_path, 0)
    reader = WorkerMetrics(prometheus_client.CollectorRegistry(), tmp_path, 1)
    try:
        assert not [key for key in samples(reader.render()) if key[0] == "in_flight"]
    finally:
        reader.close()
    replacement = WorkerMetrics(registry_with(2, 1), tmp_path, 0)
    try:
        scraped = samples(replacement.render())
    finally:
        replacement.close()
    assert scraped["requests_total", (("model", "m"),)] == 7
    assert scraped["latency_count", ()] == 7
    assert scraped["in_flight", (("worker", "0"),)] == 1
