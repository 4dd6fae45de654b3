"""Every Prometheus series servinglib exports, declared once: name, kind, help, labels, buckets."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Literal, final

import attrs


@final
@attrs.frozen
class Series:
    """One metric family: name, kind, help text, label names and (histograms) buckets.

    Needs ``prometheus-client`` (the ``metrics`` extra), imported when first built.
    Immutable, so thread-safe.
    """

    name: str
    kind: Literal["counter", "gauge", "histogram"]
    help: str
    labels: tuple[str, ...]
    buckets: tuple[float, ...] = ()

    def metric(self, registry: Any) -> Any:  # noqa: ANN401 - prometheus_client's types
        """A prometheus_client metric of this series, registered in ``registry``."""
        import prometheus_client

        make = getattr(prometheus_client, self.kind.capitalize())  # Counter, Gauge, Histogram
        buckets = {"buckets": self.buckets} if self.buckets else {}
        return make(self.name, self.help, self.labels, registry=registry, **buckets)

    def family(self) -> Any:  # noqa: ANN401 - prometheus_client's types
        """An empty metric family of this series, for a collector to fill at scrape time."""
        from prometheus_client import metrics_core

        make = getattr(metrics_core, f"{self.kind.capitalize()}MetricFamily")
        return make(self.name, self.help, labels=self.labels)


# Microsecond buckets for request and queueing latencies: 50 µs .. 60 s.
_LATENCY_US = (
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000,
    500_000, 1_000_000, 2_500_000, 5_000_000, 10_000_000, 30_000_000, 60_000_000,
)  # fmt: skip
_BATCH_SIZE = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
_LOAD_S = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
_PARTS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000)
_FIRST_PART_S = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30,
)  # fmt: skip
_SHADOW_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10)
_POOL = ("thread_pool_name",)
_MODEL = ("model_name",)

RECORDED: Final[Mapping[str, Series]] = {
    "queuing_latency": Series(":tensorflow:serving:batching_session:queuing_latency", "histogram",
        "Time a request waited in a batch queue, in microseconds.", _POOL, _LATENCY_US),
    "input_batch_size": Series(":tensorflow:serving:batching_session:input_batch_size", "histogram",
        "Rows of the requests in each batch, before padding.", _POOL, _BATCH_SIZE),
    "processed_batch_size": Series(
        ":tensorflow:serving:batching_session:processed_batch_size", "histogram",
        "Rows each batch ran with, padding included.", _POOL, _BATCH_SIZE),
    "padding_size": Series(":tensorflow:serving:batching_session:padding_size", "histogram",
        "Padding rows added to each batch.", _POOL, (0, *_BATCH_SIZE)),
    "batches": Series(":tensorflow:serving:batching_session:wrapped_run_count", "counter",
        "The number of batches run.", _POOL),
    "load_seconds": Series("servinglib_model_load_seconds", "histogram",
        "Time from a version's LOADING to AVAILABLE (its load and warmup), in seconds.",
        _MODEL, _LOAD_S),
    "load_failures": Series("servinglib_model_load_failures", "counter",
        "Versions that ended with an error, by model.", _MODEL),
    "download_bytes": Series("servinglib_model_download_bytes", "counter",
        "Bytes of versions downloaded from object storage into the local cache, by model.", _MODEL),
    "download_seconds": Series("servinglib_model_download_seconds", "histogram",
        "Time to download one version from object storage, in seconds.", _MODEL, _LOAD_S),
    "storage_errors": Series("servinglib_model_storage_errors", "counter",
        "Failed listings and downloads of a model's object-storage base path.",
        ("model_name", "operation")),
    "on_demand_loads": Series("servinglib_on_demand_loads", "counter",
        "Loads a request started for a model loaded on demand, by model and outcome (OK, or "
        "the load's error code).", ("model_name", "outcome")),
    "on_demand_evictions": Series("servinglib_on_demand_evictions", "counter",
        "Models loaded on demand unloaded to make room in the model memory budget.", _MODEL),
    "cold_start": Series("servinglib_on_demand_cold_start_seconds", "histogram",
        "Time from the first request for a model not loaded to its available version, in "
        "seconds (all models).", (), _LOAD_S),
}  # fmt: skip
"""What ServerMetrics records as it happens, by its own name for each."""

SCRAPED: Final[Mapping[str, Series]] = {
    "request_count": Series(":tensorflow:serving:request_count", "counter",
        "The number of requests, by model and status.", ("model_name", "status")),
    "request_latency": Series(":tensorflow:serving:request_latency", "histogram",
        "Request latency in microseconds, by model, API and entrypoint (REST or GRPC).",
        ("model_name", "API", "entrypoint"), _LATENCY_US),
    "version_state": Series("servinglib_model_version_state", "gauge",
        "1 for each version's current state (START, LOADING, AVAILABLE, UNLOADING).",
        ("model_name", "version", "state")),
    "calls_past_deadline": Series("servinglib_model_calls_past_deadline", "gauge",
        "Model calls still running after their request's deadline: each holds a worker "
        "of the model's share until it returns.", _MODEL),
    "request_log_count": Series(":tensorflow:serving:request_log_count", "counter",
        "Sampled requests of models with a logging_config, by outcome: OK (written), "
        "RESOURCE_EXHAUSTED (dropped: queue full), INTERNAL (sink failed), NOT_FOUND "
        "(no such collector).", ("model_name", "status_code")),
    "requests_in_flight": Series("servinglib_model_requests_in_flight", "gauge",
        "Inference requests a model is answering now (queued, batched or running).", _MODEL),
    "requests_queued": Series("servinglib_model_requests_queued", "gauge",
        "Requests of a model waiting in its batch queues (0 when it is not batched).", _MODEL),
    "batch_queue_depth": Series("servinglib_batch_queue_depth", "gauge",
        "Requests waiting in each batch queue (model/version/signature).", ("queue",)),
    "cache_hits": Series("servinglib_response_cache_hits", "counter",
        "Requests answered from the response cache, by model (Triton's "
        "nv_cache_num_hits_per_model).", _MODEL),
    "cache_misses": Series("servinglib_response_cache_misses", "counter",
        "Requests the response cache was asked for and did not hold, by model (Triton's "
        "nv_cache_num_misses_per_model).", _MODEL),
    "cache_bytes": Series("servinglib_response_cache_bytes", "gauge",
        "Bytes the response cache's entries hold (at most its size).", ()),
    "cache_evictions": Series("servinglib_response_cache_evictions", "counter",
        "Entries the response cache dropped to make room (least recently used first).", ()),
    "sequences_active": Series("servinglib_sequences_active", "gauge",
        "Sequences of a sequence model holding a batch slot now (Triton's sequence batcher).",
        _MODEL),
    "sequence_backlog": Series("servinglib_sequence_backlog", "gauge",
        "Sequences of a sequence model waiting for a free slot.", _MODEL),
    "sequence_slots": Series("servinglib_sequence_slots", "gauge",
        "The batch slots of a sequence model, all its instances' (active / slots: the slot "
        "utilisation).", _MODEL),
    "shadow_calls": Series("servinglib_shadow_calls", "counter",
        "Copies of answered calls sent to a model's shadow version (its traffic rule), by model "
        "and outcome: agreed, disagreed (outputs compared with the primary's), failed (the shadow "
        "call raised), dropped (the shadow queue was full).", ("model_name", "outcome")),
    "shadow_latency": Series("servinglib_shadow_latency_seconds", "histogram",
        "Time of each shadow call, off the request path, in seconds.", _MODEL, _SHADOW_S),
    "resident_models": Series("servinglib_resident_models", "gauge",
        "Models loaded or loading (pinned ones included) against those registered only, by "
        "residency (resident, registered).", ("residency",)),
    "resident_bytes": Series("servinglib_resident_model_bytes", "gauge",
        "The estimates of the models loaded or loading, in bytes.", ()),
    "memory_budget": Series("servinglib_model_memory_budget_bytes", "gauge",
        "The model memory budget (--model_memory_budget), in bytes; 0: none.", ()),
}  # fmt: skip
"""What ServerMetrics' collectors compute at each scrape, by their own name for each."""

STREAMS: Final[Mapping[str, Series]] = {
    "streams": Series("servinglib_streams", "counter",
        "Streamed answers (gRPC ModelStreamInfer, REST generate and generate_stream) ended, "
        "by model and outcome (OK, CANCELLED when the client left, or the error's code).",
        ("model_name", "outcome")),
    "parts": Series("servinglib_stream_parts", "histogram",
        "Parts each stream handed to its client.", _MODEL, _PARTS),
    "first_part": Series("servinglib_stream_first_part_seconds", "histogram",
        "Time from a stream's start to its first part, in seconds.", _MODEL, _FIRST_PART_S),
}  # fmt: skip
"""What StreamMetrics records, by its own name for each."""

SERIES: Final = (*RECORDED.values(), *SCRAPED.values(), *STREAMS.values())
"""Every series servinglib exports (a scrape shows each of them once metrics are on)."""
