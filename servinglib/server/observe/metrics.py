"""ServerMetrics: Prometheus metrics of requests, models and batching, under TF Serving's names.

Needs ``prometheus-client`` (the ``metrics`` extra).
"""

from __future__ import annotations

import bisect
import itertools
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol, final

from servinglib._install import install_hint
from servinglib.core.servable_id import ServableId
from servinglib.core.servable_state import ManagerState, ServableState
from servinglib.core.servable_state_monitor import ServableStateAndTime
from servinglib.core.transition_times import TransitionTimes
from servinglib.errors import (
    FailedPreconditionError,
    StatusCode,
)
from servinglib.server.observe.model_labels import UNKNOWN_MODEL, ModelLabels
from servinglib.server.observe.series import RECORDED, SCRAPED

if TYPE_CHECKING:
    from servinglib.batching.scheduler import BatchRecord, SharedBatchScheduler
    from servinglib.core.on_demand_loads import OnDemandEvent, OnDemandLoads
    from servinglib.core.servable_state_monitor import ServableStateMonitor
    from servinglib.server.observe.worker_metrics import WorkerMetrics
    from servinglib.server.server_core import ServerCore
    from servinglib.sources.remote_mirror import StoreEvent

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The content type of :meth:`ServerMetrics.render` (Prometheus text format 0.0.4)."""

DEFAULT_METRICS_PATH = "/monitoring/prometheus/metrics"
"""Where TF Serving serves Prometheus metrics (the REST app also answers ``/metrics``)."""


class _Counts(Protocol):
    def counts(self) -> dict[tuple[str, str], int]: ...


class PlaneGauges(Protocol):
    """What the metrics read from a DataPlane at each scrape (a DataPlane is one)."""

    @property
    def request_logger(self) -> _Counts: ...

    def overdue_calls(self) -> dict[str, int]: ...

    def requests_in_flight(self) -> dict[str, int]: ...

    def response_cache_usage(self) -> _CacheUsage | None: ...

    def sequence_gauges(self) -> Mapping[str, _SequenceGauge]: ...

    def shadow_usage(self) -> _ShadowUsage: ...


class _SequenceGauge(Protocol):
    """A sequence model's gauge (plane.sequence_gauges.SequenceGauge)."""

    @property
    def active(self) -> int: ...
    @property
    def backlog(self) -> int: ...
    @property
    def slots(self) -> int: ...


class _ShadowUsage(Protocol):
    """What the metrics read of the copies to shadow versions (plane.shadowing.ShadowUsage)."""

    @property
    def outcomes(self) -> Mapping[tuple[str, str], int]: ...

    @property
    def latency(self) -> Mapping[str, tuple[tuple[int, ...], float]]: ...


class _CacheUsage(Protocol):
    """What the metrics read of the response cache's usage (plane.response_cache.CacheUsage:
    observers do not import the plane)."""

    @property
    def size_bytes(self) -> int: ...
    @property
    def used_bytes(self) -> int: ...
    @property
    def entries(self) -> int: ...
    @property
    def evictions(self) -> int: ...
    @property
    def hits(self) -> Mapping[str, int]: ...
    @property
    def misses(self) -> Mapping[str, int]: ...


def _prometheus() -> Any:  # noqa: ANN401 - the module, imported lazily
    try:
        import prometheus_client
    except ImportError as error:
        raise FailedPreconditionError(
            "Metrics need prometheus-client, which is not installed: " + install_hint("metrics")
        ) from error
    return prometheus_client


@final
class ServerMetrics:
    """The metrics of one server, in their own registry (so several servers can share a process).

    Front ends call :meth:`observe_request` once per request; :meth:`attach`
    follows a ServerCore's version states (those before it too), batches
    and configured models (the only model names requests are labelled
    with: any other is :data:`UNKNOWN_MODEL`); :meth:`render` is the text a
    scrape gets.
    Thread-safe.
    """

    def __init__(self) -> None:
        self.registry = registry = _prometheus().CollectorRegistry(auto_describe=True)
        self._labels = ModelLabels()
        self._requests = _RequestStats(SCRAPED["request_latency"].buckets)
        registry.register(_RequestCollector(self._requests))
        self._recorded = {key: series.metric(registry) for key, series in RECORDED.items()}
        self._lock = threading.Lock()
        self._states: dict[ServableId, ManagerState] = {}  # guarded by: _lock
        self._times = TransitionTimes()
        self.scheduler: SharedBatchScheduler | None = None
        self.plane: PlaneGauges | None = None
        self.on_demand: OnDemandLoads | None = None
        registry.register(_StateCollector(self, self._labels))
        self._workers: WorkerMetrics | None = None

    def observe_request(
        self, model_name: str, api: str, entrypoint: str, status: StatusCode, latency_s: float
    ) -> None:
        """Counts one request and records its latency (``entrypoint``: ``REST`` or ``GRPC``).

        ``model_name`` is the request's: a model no attached core has
        configured now is counted under :data:`UNKNOWN_MODEL`.
        """
        label = self._labels.label(model_name)
        self._requests.observe(label, api, entrypoint, status.name, latency_s * 1e6)

    def attach(self, core: ServerCore) -> None:
        """Follows ``core``: its versions' states, load times and failures, and its batches.

        Call it any time after ``ServerCore(config)`` returned: what happened
        before is read from the core's event log.  From then on the models
        ``core`` has configured are labelled by their names.
        Requires: called once per core (a second call counts its past again).
        """
        self._labels.follow(core)
        follower = _Follower(core.monitor, self._record_state)
        core.event_bus.subscribe(follower.on_event)  # before reading the past: nothing slips by
        follower.catch_up()
        core.store_events.subscribe(self._record_store_event)
        self.on_demand = core.on_demand
        core.on_demand.events.subscribe(self._record_on_demand)
        scheduler = core.batch_scheduler
        if scheduler is not None:
            self.scheduler = scheduler
            scheduler.add_observer(self.observe_batch)

    def attach_plane(self, plane: PlaneGauges) -> None:
        """Exports ``plane``'s calls running past their deadline, per model."""
        self.plane = plane

    def observe_batch(self, record: BatchRecord) -> None:
        """Records one batch: sizes, padding and each request's queueing latency."""
        pool, recorded = record.thread_pool_name, self._recorded
        recorded["batches"].labels(pool).inc()
        recorded["input_batch_size"].labels(pool).observe(record.size)
        recorded["processed_batch_size"].labels(pool).observe(record.padded_size)
        recorded["padding_size"].labels(pool).observe(record.padded_size - record.size)
        queuing = recorded["queuing_latency"].labels(pool)
        for latency_s in record.queueing_latencies_s:
            queuing.observe(latency_s * 1e6)

    def _record_state(self, event: ServableState, time_s: float) -> None:
        """Records a version's state change seen at ``time_s`` (the core monitor's clock)."""
        servable = event.id
        state = event.manager_state
        took_s = self._times.observe(event, time_s)
        with self._lock:
            if state is ManagerState.END:
                self._states.pop(servable, None)
            else:
                self._states[servable] = state
        if state is ManagerState.AVAILABLE and took_s is not None:
            self._recorded["load_seconds"].labels(servable.name).observe(took_s)
        if state is ManagerState.END and not event.ok:
            self._recorded["load_failures"].labels(servable.name).inc()

    def _record_store_event(self, event: StoreEvent) -> None:
        """Counts a remote base path's download or failure."""
        name = event.servable_name
        if event.kind == "downloaded":
            self._recorded["download_bytes"].labels(name).inc(event.size_bytes)
            self._recorded["download_seconds"].labels(name).observe(event.seconds)
        else:
            operation = "list" if event.kind == "listing_failed" else "download"
            self._recorded["storage_errors"].labels(name, operation).inc()

    def _record_on_demand(self, event: OnDemandEvent) -> None:
        """Counts a load on demand (and times a cold start) or an eviction."""
        recorded, name = self._recorded, event.name
        if event.kind == "evicted":
            recorded["on_demand_evictions"].labels(name).inc()
            return
        outcome = "OK" if event.error is None else event.error.code.name
        recorded["on_demand_loads"].labels(name, outcome).inc()
        if event.kind == "loaded":
            recorded["cold_start"].observe(event.seconds)

    def states(self) -> dict[ServableId, ManagerState]:
        """Every version's current state (versions that ended are left out)."""
        with self._lock:
            return dict(self._states)

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric (:data:`CONTENT_TYPE`).

        After :meth:`share_with_workers`, every worker's metrics (see WorkerMetrics).
        """
        if self._workers is not None:
            return self._workers.render()
        from servinglib.server.observe.exposition import render

        return render(self.registry.collect())

    def share_with_workers(self, directory: str, index: int) -> WorkerMetrics:
        """Publishes these metrics as worker ``index`` of ``directory``; renders all workers' sum.

        Requires: called once, before serving (``--num_workers`` workers do).
        """
        from servinglib.server.observe.worker_metrics import WorkerMetrics

        self._workers = WorkerMetrics(self.registry, directory, index)
        return self._workers


@final
class _Follower:
    """Feeds one core's version-state events to ``record``: first its past, then as they come.

    Events delivered while the past is read are held back and recorded after
    it, leaving out those the past already holds (the core's monitor logs
    each event before the bus delivers it here), so each event is recorded
    once and in order.  Thread-safe.
    """

    def __init__(
        self, monitor: ServableStateMonitor, record: Callable[[ServableState, float], None]
    ) -> None:
        self._monitor = monitor
        self._record = record
        self._lock = threading.Lock()
        self._held: list[ServableStateAndTime] | None = []  # None once caught up; guarded by: _lock

    def on_event(self, event: ServableState) -> None:
        """An event-bus listener; the event is timed as the monitor that logged it first saw it."""
        seen = self._monitor.get_state_and_time(event.id)
        time_s = seen.time_s if seen is not None and seen.state is event else time.monotonic()
        with self._lock:
            if self._held is not None:
                self._held.append(ServableStateAndTime(event, time_s))
            else:
                self._record(event, time_s)

    def catch_up(self) -> None:
        """Records the monitor's log, live versions whose events left it, then the events held.

        Requires: :meth:`on_event` listens already.
        """
        past = self._monitor.get_bounded_log()
        live = self._monitor.get_live_servable_states()
        in_past = {entry.state.id for entry in past}
        with self._lock:
            for versions in live.values():
                for entry in versions.values():
                    if entry.state.id not in in_past:  # older than the bounded log reaches
                        self._record(entry.state, entry.time_s)
            for entry in past:
                self._record(entry.state, entry.time_s)
            logged = {id(entry.state) for entry in past}
            held, self._held = self._held or [], None
            for entry in held:
                if id(entry.state) not in logged:
                    self._record(entry.state, entry.time_s)


@final
class _RequestStats:
    """Request counts and latency histograms as plain numbers, exported at scrape time.

    The request path's metrics: prometheus_client's labelled children take
    a lock per increment and find the bucket with a Python loop (three
    locks and up to 19 comparisons per request); this takes one lock and a
    bisect.  Thread-safe.
    """

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self._lock = threading.Lock()
        self._counts: dict[tuple[str, str], int] = {}  # (model, status); guarded by: _lock
        # (model, API, entrypoint) → [count per bucket ..., +Inf count, sum]; guarded by: _lock
        self._latencies: dict[tuple[str, str, str], list[float]] = {}

    def observe(
        self, model_name: str, api: str, entrypoint: str, status: str, latency_us: float
    ) -> None:
        bucket = bisect.bisect_left(self.bounds, latency_us)  # first bound >= the value: "le"
        count_key = (model_name, status)
        latency_key = (model_name, api, entrypoint)
        with self._lock:
            self._counts[count_key] = self._counts.get(count_key, 0) + 1
            row = self._latencies.get(latency_key)
            if row is None:
                row = self._latencies[latency_key] = [0.0] * (len(self.bounds) + 2)
            row[bucket] += 1
            row[-1] += latency_us

    def snapshot(
        self,
    ) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str, str], list[float]]]:
        """Copies of the counts and of the latency rows, taken together."""
        with self._lock:
            return dict(self._counts), {key: list(row) for key, row in self._latencies.items()}


@final
class _RequestCollector:
    """TF Serving's ``request_count`` and ``request_latency`` families from a _RequestStats."""

    def __init__(self, stats: _RequestStats) -> None:
        from prometheus_client.utils import floatToGoString

        self._stats = stats
        self._bounds = [floatToGoString(bound) for bound in stats.bounds] + ["+Inf"]  # type: ignore[no-untyped-call]

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        counts, latencies = self._stats.snapshot()
        requests = SCRAPED["request_count"].family()
        for (model_name, status), count in sorted(counts.items()):
            requests.add_metric([model_name, status], count)
        yield requests
        latency = SCRAPED["request_latency"].family()
        for key, row in sorted(latencies.items()):
            cumulative = list(itertools.accumulate(row[:-1]))
            latency.add_metric(list(key), list(zip(self._bounds, cumulative, strict=True)), row[-1])
        yield latency


@final
class _StateCollector:
    """Computed at scrape time: version states, overdue calls, request logs, load gauges."""

    def __init__(self, metrics: ServerMetrics, labels: ModelLabels) -> None:
        self._metrics = metrics
        self._labels = labels

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        states = SCRAPED["version_state"].family()
        ordered = sorted(self._metrics.states().items(), key=lambda i: (i[0].name, i[0].version))
        for servable, state in ordered:
            states.add_metric([servable.name, str(servable.version), state.value], 1)
        yield states
        plane = self._metrics.plane
        if plane is not None:
            overdue = SCRAPED["calls_past_deadline"].family()
            for name, count in sorted(plane.overdue_calls().items()):
                overdue.add_metric([name], count)
            yield overdue
            logged = SCRAPED["request_log_count"].family()
            for (name, outcome), count in sorted(plane.request_logger.counts().items()):
                logged.add_metric([name, outcome], count)
            yield logged
            usage = plane.response_cache_usage()
            if usage is not None:
                yield from _cache_families(usage)
            yield from _sequence_families(plane.sequence_gauges())
            yield from _shadow_families(plane.shadow_usage())
        yield from self._load_gauges()
        yield from self._residency_gauges()

    def _residency_gauges(self) -> Iterator[Any]:
        """The models resident and registered, their bytes and the budget."""
        on_demand = self._metrics.on_demand
        if on_demand is None:
            return
        statistics = on_demand.statistics()
        models = SCRAPED["resident_models"].family()
        models.add_metric(["resident"], statistics.resident_models)
        models.add_metric(["registered"], statistics.registered_models)
        yield models
        resident = SCRAPED["resident_bytes"].family()
        resident.add_metric([], statistics.resident_bytes)
        yield resident
        budget = SCRAPED["memory_budget"].family()
        budget.add_metric([], statistics.budget_bytes or 0)
        yield budget

    def _load_gauges(self) -> Iterator[Any]:
        """Requests in flight and waiting in batch queues, per model: always, 0 when none.

        Every configured model and model with versions is listed; requests in
        flight naming no configured model are summed under UNKNOWN_MODEL.
        """
        models = {servable.name for servable in self._metrics.states()} | self._labels.configured()
        plane = self._metrics.plane
        in_flight: dict[str, int] = {}
        for name, count in (plane.requests_in_flight() if plane is not None else {}).items():
            label = name if name in models else UNKNOWN_MODEL
            in_flight[label] = in_flight.get(label, 0) + count
        scheduler = self._metrics.scheduler
        queues = scheduler.statistics() if scheduler is not None else {}
        queued: dict[str, int] = {}
        for queue, stats in queues.items():  # named model/version/signature
            model = queue.split("/", 1)[0]
            queued[model] = queued.get(model, 0) + stats.queued_tasks
        models |= in_flight.keys() | queued.keys()
        flying = SCRAPED["requests_in_flight"].family()
        waiting = SCRAPED["requests_queued"].family()
        for model in sorted(models):
            flying.add_metric([model], in_flight.get(model, 0))
            waiting.add_metric([model], queued.get(model, 0))
        yield flying
        yield waiting
        if scheduler is None:
            return
        depth = SCRAPED["batch_queue_depth"].family()
        for name, stats in sorted(queues.items()):
            depth.add_metric([name], stats.queued_tasks)
        yield depth


def _sequence_families(gauges: Mapping[str, _SequenceGauge]) -> Iterator[Any]:
    """The sequence models' series (no samples without a sequence model)."""
    for series, field in (
        ("sequences_active", "active"),
        ("sequence_backlog", "backlog"),
        ("sequence_slots", "slots"),
    ):
        family = SCRAPED[series].family()
        for name, gauge in sorted(gauges.items()):
            family.add_metric([name], getattr(gauge, field))
        yield family


def _shadow_families(usage: _ShadowUsage) -> Iterator[Any]:
    """The copies to shadow versions: by model and outcome, and the shadow calls' latency."""
    calls = SCRAPED["shadow_calls"].family()
    for (name, outcome), count in sorted(usage.outcomes.items()):
        calls.add_metric([name, outcome], count)
    yield calls
    latency = SCRAPED["shadow_latency"].family()
    bounds = [*(str(b) for b in SCRAPED["shadow_latency"].buckets), "+Inf"]
    for name, (counts, total_s) in sorted(usage.latency.items()):
        latency.add_metric(
            [name], list(zip(bounds, itertools.accumulate(counts), strict=True)), total_s
        )
    yield latency


def _cache_families(usage: _CacheUsage) -> Iterator[Any]:
    """The response cache's series: hits and misses by model, its bytes and evictions."""
    for series, counts in (("cache_hits", usage.hits), ("cache_misses", usage.misses)):
        family = SCRAPED[series].family()
        for name, count in sorted(counts.items()):
            family.add_metric([name], count)
        yield family
    used = SCRAPED["cache_bytes"].family()
    used.add_metric([], usage.used_bytes)
    yield used
    evictions = SCRAPED["cache_evictions"].family()
    evictions.add_metric([], usage.evictions)
    yield evictions
