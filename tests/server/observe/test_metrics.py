"""ServerMetrics: TF Serving's request and batching metrics, model states, the monitoring file."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import attrs
import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from servinglib.batching import BatchingParameters
from servinglib.core.event_bus import EventBus
from servinglib.core.servable_id import ServableId
from servinglib.core.servable_state import ManagerState, ServableState
from servinglib.core.servable_state_monitor import ServableStateMonitor
from servinglib.errors import NotFoundError, StatusCode
from servinglib.server import record_request
from servinglib.server.config import ModelConfig, ModelServerConfig
from servinglib.server.model_spec import ModelSpec
from servinglib.server.observe.metrics import (
    DEFAULT_METRICS_PATH,
    UNKNOWN_MODEL,
    ServerMetrics,
    _Follower,
)
from servinglib.server.plane.data_plane import DataPlane
from servinglib.server.rest import RestServer, create_app
from servinglib.server.rest.metrics_endpoint import MetricsEndpoint
from servinglib.server.server_core import ServerCore
from servinglib.testing import FakeClock, wait_until, write_python_model
from servinglib.testing.plugin import TEST_SERVER_CORE_OPTIONS

MODEL_PY = """
from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec

class Model(PythonModel):
    @signature(name="serving_default", inputs=[TensorSpec("x", "float32", [-1])],
               outputs=[TensorSpec("y", "float32", [-1])])
    def predict(self, x):
        return {"y": x + 1}
"""


def samples(metrics: ServerMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the rendered text, parsed as Prometheus parses it."""
    found = {}
    for family in text_string_to_metric_families(metrics.render().decode()):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def value(metrics: ServerMetrics, name: str, **labels: str) -> float:
    return samples(metrics).get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture
def metrics(tmp_path: Path) -> Iterator[ServerMetrics]:
    """A ServerMetrics attached to a core serving the Python model "m"."""
    config = ModelServerConfig([ModelConfig.python("m", write_model(tmp_path, "m"))])
    with ServerCore(config, TEST_SERVER_CORE_OPTIONS) as core:
        metrics = ServerMetrics()
        metrics.attach(core)
        yield metrics


def test_requests_are_counted_by_status_and_timed_in_microseconds(metrics: ServerMetrics) -> None:
    """observe_request feeds TF Serving's request_count and request_latency (µs)."""
    metrics.observe_request("m", "predict", "REST", StatusCode.OK, 0.002)
    metrics.observe_request("m", "predict", "REST", StatusCode.OK, 0.004)
    metrics.observe_request("m", "predict", "GRPC", StatusCode.INVALID_ARGUMENT, 0.001)
    assert (
        value(metrics, ":tensorflow:serving:request_count_total", model_name="m", status="OK") == 2
    )
    assert (
        value(
            metrics,
            ":tensorflow:serving:request_count_total",
            model_name="m",
            status="INVALID_ARGUMENT",
        )
        == 1
    )
    labels = {"model_name": "m", "API": "predict", "entrypoint": "REST"}
    assert value(metrics, ":tensorflow:serving:request_latency_count", **labels) == 2
    assert value(metrics, ":tensorflow:serving:request_latency_sum", **labels) == pytest.approx(
        6000
    )


def test_latency_buckets_are_cumulative_and_include_their_upper_bound(
    metrics: ServerMetrics,
) -> None:
    """A latency equal to a bucket's bound counts in it ("le"); one past the last is only +Inf."""
    for latency_s in (50e-6, 51e-6, 70.0):
        metrics.observe_request("m", "predict", "REST", StatusCode.OK, latency_s)
    labels = {"model_name": "m", "API": "predict", "entrypoint": "REST"}
    bucket = ":tensorflow:serving:request_latency_bucket"
    assert value(metrics, bucket, **labels, le="50.0") == 1
    assert value(metrics, bucket, **labels, le="100.0") == 2
    assert value(metrics, bucket, **labels, le="6e+07") == 2
    assert value(metrics, bucket, **labels, le="+Inf") == 3
    assert value(metrics, ":tensorflow:serving:request_latency_count", **labels) == 3


def test_two_servers_in_one_process_keep_their_own_metrics() -> None:
    """Each ServerMetrics has its own registry, so metrics of two servers never mix."""
    first, second = ServerMetrics(), ServerMetrics()
    first.observe_request("m", "predict", "REST", StatusCode.OK, 0.001)
    count = ":tensorflow:serving:request_count_total"
    assert value(first, count, model_name=UNKNOWN_MODEL, status="OK") == 1
    assert value(second, count, model_name=UNKNOWN_MODEL, status="OK") == 0


def test_attached_core_reports_states_loads_and_batches(tmp_path: Path) -> None:
    """Attached to a ServerCore: version states, load times, batch sizes and queue depth."""
    config = ModelServerConfig([ModelConfig.python("m", write_model(tmp_path, "m"))])
    options = attrs.evolve(
        TEST_SERVER_CORE_OPTIONS,
        batching_parameters=BatchingParameters(max_batch_size=8, num_batch_threads=1),
    )
    metrics = ServerMetrics()
    with ServerCore(None, options) as core:
        metrics.attach(core)
        core.reload_config(config)
        assert (
            value(
                metrics,
                "servinglib_model_version_state",
                model_name="m",
                version="1",
                state="AVAILABLE",
            )
            == 1
        )
        assert value(metrics, "servinglib_model_load_seconds_count", model_name="m") == 1
        assert value(metrics, "servinglib_batch_queue_depth", queue="m/1/serving_default") == 0
        plane = DataPlane(core)
        asyncio.run(plane.infer(ModelSpec.latest("m"), None, {"x": np.zeros(3, np.float32)}))
        plane.close()
        pool = {"thread_pool_name": "batch_threads"}
        wait_until(
            lambda: (
                value(
                    metrics, ":tensorflow:serving:batching_session:wrapped_run_count_total", **pool
                )
                == 1
            )
        )
        assert (
            value(metrics, ":tensorflow:serving:batching_session:input_batch_size_sum", **pool) == 3
        )
        assert (
            value(metrics, ":tensorflow:serving:batching_session:queuing_latency_count", **pool)
            == 1
        )
        core.reload_config(ModelServerConfig())
        wait_until(lambda: not metrics.states())


BROKEN_MODEL_PY = """
from servinglib.loaders import PythonModel

class Model(PythonModel):
    def load(self, path):
        raise RuntimeError("this model never loads")
"""


def write_model(root: Path, name: str, source: str = MODEL_PY) -> str:
    """A base path holding version 1 of a Python model."""
    return str(write_python_model(root, name, source))


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str) -> Samples:
    """Every sample a Prometheus scrape of ``url`` gets, over HTTP."""
    response = httpx.get(f"{url}{DEFAULT_METRICS_PATH}", timeout=30.0)
    assert response.status_code == 200
    found = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def sample(found: Samples, name: str, **labels: str) -> float | None:
    """The value of one sample, None if the scrape had none."""
    return found.get((name, tuple(sorted(labels.items()))))


def version_states(found: Samples) -> dict[tuple[str, str], str]:
    """(model, version) → state, from the version-state gauge of a scrape."""
    states = {}
    for (name, labels), value in found.items():
        if name == "servinglib_model_version_state" and value == 1:
            labelled = dict(labels)
            states[(labelled["model_name"], labelled["version"])] = labelled["state"]
    return states


def test_attach_after_start_sees_loaded_versions_and_later_changes(tmp_path: Path) -> None:
    """Attached after ServerCore(config) returned, a scrape shows earlier loads and later ones."""
    config = ModelServerConfig(
        [
            ModelConfig.python("m", write_model(tmp_path, "m")),
            ModelConfig.python("broken", write_model(tmp_path, "broken", BROKEN_MODEL_PY)),
        ]
    )
    options = attrs.evolve(TEST_SERVER_CORE_OPTIONS, start_degraded=True)
    metrics = ServerMetrics()
    with ServerCore(config, options) as core:
        metrics.attach(core)
        app = create_app(core, on_request=record_request(metrics))
        with RestServer(MetricsEndpoint(app, metrics)) as server:
            found = scrape(server.url)
            assert version_states(found) == {("m", "1"): "AVAILABLE"}
            assert sample(found, "servinglib_model_load_seconds_count", model_name="m") == 1
            assert (sample(found, "servinglib_model_load_seconds_sum", model_name="m") or 0) > 0
            assert sample(found, "servinglib_model_load_failures_total", model_name="broken") == 1

            n = ModelConfig.python("n", write_model(tmp_path, "n"))
            core.reload_config(ModelServerConfig([n]))
            wait_until(lambda: version_states(scrape(server.url)) == {("n", "1"): "AVAILABLE"})
            found = scrape(server.url)
            assert sample(found, "servinglib_model_load_seconds_count", model_name="n") == 1
            assert sample(found, "servinglib_model_load_seconds_count", model_name="m") == 1
        app.close()


def states_of(name: str, version: int, *states: ManagerState) -> list[ServableState]:
    """One event per state of version ``version`` of ``name``."""
    return [ServableState(ServableId(name, version), state) for state in states]


def test_events_published_while_attaching_are_recorded_once_in_order() -> None:
    """Events logged before catching up come from the log, those held after it; none twice."""
    clock = FakeClock()
    bus: EventBus[ServableState] = EventBus()
    monitor = ServableStateMonitor(bus, max_count_log_events=100, clock=clock)
    recorded: list[tuple[ServableState, float]] = []
    before = states_of("m", 1, ManagerState.START, ManagerState.LOADING)
    during = states_of("m", 1, ManagerState.AVAILABLE)
    after = states_of("m", 1, ManagerState.UNLOADING, ManagerState.END)
    for event in before:
        bus.publish(event)
    clock.advance(2.0)
    follower = _Follower(monitor, lambda event, time_s: recorded.append((event, time_s)))
    bus.subscribe(follower.on_event)
    for event in during:
        bus.publish(event)  # logged by the monitor and held by the follower
    follower.catch_up()
    clock.advance(1.0)
    for event in after:
        bus.publish(event)
    assert [event for event, _ in recorded] == before + during + after
    assert all(a is b for a, (b, _) in zip(before + during + after, recorded, strict=True))
    assert [time_s for _, time_s in recorded] == [0.0, 0.0, 2.0, 3.0, 3.0]


def test_versions_older_than_the_event_log_are_seen_from_their_live_state() -> None:
    """A version whose events left the bounded log is still recorded, in its current state."""
    bus: EventBus[ServableState] = EventBus()
    monitor = ServableStateMonitor(bus, max_count_log_events=2, clock=FakeClock())
    old = states_of("old", 1, ManagerState.START, ManagerState.LOADING, ManagerState.AVAILABLE)
    new = states_of("new", 1, ManagerState.START, ManagerState.LOADING)
    for event in old + new:
        bus.publish(event)
    metrics = ServerMetrics()
    follower = _Follower(monitor, metrics._record_state)
    bus.subscribe(follower.on_event)
    follower.catch_up()
    assert metrics.states() == {
        ServableId("old", 1): ManagerState.AVAILABLE,
        ServableId("new", 1): ManagerState.LOADING,
    }


def test_load_gauges_are_exported_for_every_model_without_batching(tmp_path: Path) -> None:
    """In-flight and queued gauges list every model, 0 at rest, also with batching off."""
    config = ModelServerConfig([ModelConfig("m", write_model(tmp_path, "m"), "python")])
    with ServerCore(config, TEST_SERVER_CORE_OPTIONS) as core:
        metrics = ServerMetrics()
        metrics.attach(core)
        plane = DataPlane(core, max_workers=1)
        metrics.attach_plane(plane)
        try:
            asyncio.run(plane.infer(ModelSpec.latest("m"), None, {"x": np.ones(2, np.float32)}))
            text = metrics.render().decode()
        finally:
            plane.close()
    assert 'servinglib_model_requests_in_flight{model_name="m"} 0.0' in text
    assert 'servinglib_model_requests_queued{model_name="m"} 0.0' in text
    assert "_created" not in text
    assert ":tensorflow:serving:request_count_total" not in text


def request_series(metrics: ServerMetrics) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    """The request_count and request_latency samples of a scrape (name and labels)."""
    return {key for key in samples(metrics) if key[0].startswith(":tensorflow:serving:request_")}


def test_names_of_no_configured_model_share_one_bounded_series(tmp_path: Path) -> None:
    """10,000 names of no model make the series one unknown name makes, under __unknown__."""
    config = ModelServerConfig([ModelConfig.python("m", write_model(tmp_path, "m"))])
    metrics = ServerMetrics()
    with ServerCore(config, TEST_SERVER_CORE_OPTIONS) as core:
        metrics.attach(core)
        metrics.observe_request("m", "predict", "REST", StatusCode.OK, 0.001)
        metrics.observe_request("nope-0", "predict", "REST", StatusCode.NOT_FOUND, 0.001)
        after_one = request_series(metrics)
        for i in range(1, 10_000):
            metrics.observe_request(f"nope-{i}", "predict", "REST", StatusCode.NOT_FOUND, 0.001)
        assert request_series(metrics) == after_one
        count = ":tensorflow:serving:request_count_total"
        assert value(metrics, count, model_name=UNKNOWN_MODEL, status="NOT_FOUND") == 10_000
        assert value(metrics, count, model_name="m", status="OK") == 1


def test_a_removed_model_keeps_its_series_and_later_requests_count_as_unknown(
    tmp_path: Path,
) -> None:
    """After a model leaves the config its counts stay; requests naming it then are unknown."""
    config = ModelServerConfig([ModelConfig.python("m", write_model(tmp_path, "m"))])
    metrics = ServerMetrics()
    count = ":tensorflow:serving:request_count_total"
    with ServerCore(config, TEST_SERVER_CORE_OPTIONS) as core:
        metrics.attach(core)
        metrics.observe_request("m", "predict", "GRPC", StatusCode.OK, 0.001)
        core.reload_config(ModelServerConfig())
        metrics.observe_request("m", "predict", "GRPC", StatusCode.NOT_FOUND, 0.001)
    assert value(metrics, count, model_name="m", status="OK") == 1
    assert value(metrics, count, model_name="m", status="NOT_FOUND") == 0
    assert value(metrics, count, model_name=UNKNOWN_MODEL, status="NOT_FOUND") == 1


def test_requests_in_flight_of_unknown_names_share_one_gauge(tmp_path: Path) -> None:
    """Requests to 1,000 names of no model leave one in-flight series, and none per name."""
    config = ModelServerConfig([ModelConfig.python("m", write_model(tmp_path, "m"))])
    with ServerCore(config, TEST_SERVER_CORE_OPTIONS) as core:
        metrics = ServerMetrics()
        metrics.attach(core)
        plane = DataPlane(core, max_workers=1)
        metrics.attach_plane(plane)
        try:
            for i in range(1_000):
                with pytest.raises(NotFoundError):
                    asyncio.run(plane.infer(ModelSpec.latest(f"nope-{i}"), None, {}))
            assert plane.requests_in_flight() == {}
            text = metrics.render().decode()
        finally:
            plane.close()
    in_flight = [
        line for line in text.splitlines() if line.startswith("servinglib_model_requests_")
    ]
    assert in_flight == [
        'servinglib_model_requests_in_flight{model_name="m"} 0.0',
        'servinglib_model_requests_queued{model_name="m"} 0.0',
    ]
