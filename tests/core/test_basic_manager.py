"""BasicManager: load/unload execution, handles, resources, retries, events."""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Iterator

import pytest

from servinglib.core.basic_manager import BasicManager, ManagerOptions
from servinglib.core.event_bus import EventBus
from servinglib.core.loader import Loader
from servinglib.core.loader_harness import HarnessState, LoadRetryOptions
from servinglib.core.resource_tracker import ResourceTracker
from servinglib.core.resources import ResourceAllocation
from servinglib.core.servable_data import ServableData
from servinglib.core.servable_id import ServableId
from servinglib.core.servable_request import ServableRequest
from servinglib.core.servable_state import ManagerState, ServableState
from servinglib.errors import (
    AlreadyExistsError,
    CancelledError,
    DataLossError,
    FailedPreconditionError,
    NotFoundError,
    ResourceExhaustedError,
    StatusCode,
    UnavailableError,
    UnknownError,
)
from servinglib.testing import FakeClock, FakeLoader, wait_until

TIMEOUT_S = 10.0
V1 = ServableId("m", 1)
V2 = ServableId("m", 2)
V3 = ServableId("m", 3)


class Recorder:
    """Collects every event published on a bus, in order."""

    def __init__(self, bus: EventBus[ServableState]) -> None:
        self.events: list[ServableState] = []
        bus.subscribe(self.events.append)

    def states(self, servable_id: ServableId) -> list[ManagerState]:
        return [e.manager_state for e in self.events if e.id == servable_id]


@pytest.fixture(params=[0, 2], ids=["sync-loads", "2-load-threads"])
def num_load_threads(request: pytest.FixtureRequest) -> int:
    return int(request.param)


@pytest.fixture
def bus() -> EventBus[ServableState]:
    return EventBus()


@pytest.fixture
def recorder(bus: EventBus[ServableState]) -> Recorder:
    return Recorder(bus)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def make_manager(
    bus: EventBus[ServableState],
    clock: FakeClock,
    *,
    num_load_threads: int = 0,
    num_unload_threads: int = 0,
    retries: int = 0,
    retry_interval_s: float = 10.0,
    limit: ResourceAllocation | None = None,
) -> BasicManager:
    options = ManagerOptions(
        num_load_threads=num_load_threads,
        num_unload_threads=num_unload_threads,
        load_retry=LoadRetryOptions(
            max_num_load_retries=retries, load_retry_interval_s=retry_interval_s
        ),
    )
    tracker = ResourceTracker(limit) if limit is not None else None
    return BasicManager(options, resource_tracker=tracker, event_bus=bus, clock=clock)


@pytest.fixture
def manager(
    bus: EventBus[ServableState], clock: FakeClock, num_load_threads: int
) -> Iterator[BasicManager]:
    with make_manager(bus, clock, num_load_threads=num_load_threads) as manager:
        yield manager


def load(manager: BasicManager, servable_id: ServableId, loader: FakeLoader) -> None:
    manager.manage_servable(ServableData.of(servable_id, loader))
    manager.load_servable(servable_id).result(TIMEOUT_S)


def test_load_then_unload_publishes_events_in_order(
    manager: BasicManager, recorder: Recorder
) -> None:
    """A version goes START → LOADING → AVAILABLE → UNLOADING → END, without errors."""
    loader = FakeLoader("model")
    load(manager, V1, loader)
    manager.unload_servable(V1).result(TIMEOUT_S)
    assert recorder.states(V1) == [
        ManagerState.START,
        ManagerState.LOADING,
        ManagerState.AVAILABLE,
        ManagerState.UNLOADING,
        ManagerState.END,
    ]
    assert all(event.ok for event in recorder.events)
    assert (loader.load_calls, loader.unload_calls) == (1, 1)


def test_available_is_published_only_once_a_handle_can_be_taken(
    manager: BasicManager, bus: EventBus[ServableState]
) -> None:
    """When AVAILABLE is published, servable_handle already finds the version."""
    seen: list[object] = []

    def on_event(event: ServableState) -> None:
        if event.manager_state is ManagerState.AVAILABLE:
            with manager.servable_handle(ServableRequest.from_id(event.id)) as handle:
                seen.append(handle.servable)

    bus.subscribe(on_event)
    load(manager, V1, FakeLoader("model"))
    assert seen == ["model"]


def test_unloading_is_published_while_the_version_is_still_obtainable(
    manager: BasicManager, bus: EventBus[ServableState]
) -> None:
    """UNLOADING comes first; afterwards the version stops being obtainable."""
    lookups: list[bool] = []

    def on_event(event: ServableState) -> None:
        if event.manager_state is ManagerState.UNLOADING:
            lookups.append(V1 in manager.list_available_servable_ids())

    load(manager, V1, FakeLoader())
    bus.subscribe(on_event)
    manager.unload_servable(V1).result(TIMEOUT_S)
    assert lookups == [True]
    assert manager.list_available_servable_ids() == []


def test_handles_select_specific_latest_and_earliest(manager: BasicManager) -> None:
    """Specific asks for one version; latest and earliest pick among available ones."""
    for servable_id in (V1, V2, V3):
        load(manager, servable_id, FakeLoader(f"v{servable_id.version}"))
    cases = {
        ServableRequest.latest("m"): "v3",
        ServableRequest.earliest("m"): "v1",
        ServableRequest.specific("m", 2): "v2",
    }
    for request, expected in cases.items():
        with manager.servable_handle(request) as handle:
            assert handle.servable == expected
    assert manager.list_available_servable_ids() == [V1, V2, V3]


def test_unknown_name_is_not_found(manager: BasicManager) -> None:
    """A name the manager never saw is NOT_FOUND, naming the request."""
    with pytest.raises(NotFoundError, match=r"Servable not found for request: Latest\(nope\)"):
        manager.servable_handle(ServableRequest.latest("nope"))


def test_version_never_managed_is_not_found(manager: BasicManager) -> None:
    """A specific version that was never managed is NOT_FOUND even if others serve."""
    load(manager, V1, FakeLoader())
    with pytest.raises(NotFoundError, match=r"Specific\(m, 7\)"):
        manager.servable_handle(ServableRequest.specific("m", 7))


def test_known_version_not_yet_loaded_is_unavailable(manager: BasicManager) -> None:
    """A managed version that does not serve yet is UNAVAILABLE, naming model and version."""
    manager.manage_servable(ServableData.of(V2, FakeLoader()))
    with pytest.raises(UnavailableError, match=r"\{name: m version: 2\} is not available"):
        manager.servable_handle(ServableRequest.specific("m", 2))
    with pytest.raises(UnavailableError, match="No version of servable m is available"):
        manager.servable_handle(ServableRequest.latest("m"))


def test_managing_twice_is_rejected(manager: BasicManager) -> None:
    """The same id cannot be managed twice."""
    manager.manage_servable(ServableData.of(V1, FakeLoader()))
    with pytest.raises(AlreadyExistsError):
        manager.manage_servable(ServableData.of(V1, FakeLoader()))


def test_load_requests_that_cannot_run_fail_their_future(manager: BasicManager) -> None:
    """Loading an unmanaged id is NOT_FOUND; loading twice is FAILED_PRECONDITION."""
    with pytest.raises(NotFoundError):
        manager.load_servable(V1).result(TIMEOUT_S)
    load(manager, V1, FakeLoader())
    with pytest.raises(FailedPreconditionError, match="Duplicate load request"):
        manager.load_servable(V1).result(TIMEOUT_S)


def test_unload_of_a_version_not_ready_fails(manager: BasicManager) -> None:
    """Only READY versions can be unloaded."""
    manager.manage_servable(ServableData.of(V1, FakeLoader()))
    with pytest.raises(FailedPreconditionError, match="not ready"):
        manager.unload_servable(V1).result(TIMEOUT_S)


def test_error_data_is_managed_in_error_with_an_end_event(
    manager: BasicManager, recorder: Recorder
) -> None:
    """An aspired version that arrives as an error is in ERROR and published as END(error)."""
    error = DataLossError("corrupt saved_model.pb")
    manager.manage_servable(ServableData.failed(V1, error))
    assert recorder.events == [ServableState(V1, ManagerState.END, error)]
    assert manager.harness_error(V1) == error
    assert manager.managed_servable_snapshots("m")[0].state is HarnessState.ERROR


def test_stop_managing_only_new_error_or_disabled(manager: BasicManager) -> None:
    """A serving version cannot be forgotten; a new or unloaded one can."""
    load(manager, V1, FakeLoader())
    with pytest.raises(FailedPreconditionError):
        manager.stop_managing_servable(V1)
    manager.unload_servable(V1).result(TIMEOUT_S)
    manager.stop_managing_servable(V1)
    manager.manage_servable(ServableData.of(V2, FakeLoader()))
    manager.stop_managing_servable(V2)
    assert manager.managed_servable_names() == []


def test_failing_load_is_retried_on_the_clock_then_errors(
    bus: EventBus[ServableState], clock: FakeClock, recorder: Recorder, num_load_threads: int
) -> None:
    """N retries mean N+1 attempts, one interval apart; then ERROR with the last message."""
    loader = FakeLoader(load_error=RuntimeError("disk hiccup"))
    with make_manager(
        bus, clock, num_load_threads=num_load_threads, retries=2, retry_interval_s=10
    ) as manager:
        manager.manage_servable(ServableData.of(V1, loader))
        future = manager.load_servable(V1)
        wait_until(lambda: loader.load_calls == 1 and clock.pending_timers == 1)
        clock.advance(9.9)
        assert loader.load_calls == 1
        clock.advance(0.1)
        wait_until(lambda: loader.load_calls == 2 and clock.pending_timers == 1)
        clock.advance(10)
        with pytest.raises(UnknownError, match="RuntimeError: disk hiccup") as caught:
            future.result(TIMEOUT_S)
    assert loader.load_calls == 3
    assert "{name: m version: 1}" in caught.value.message
    assert recorder.states(V1) == [ManagerState.START, ManagerState.LOADING, ManagerState.END]
    assert recorder.events[-1].health == caught.value


def test_error_that_cannot_heal_is_not_retried(
    bus: EventBus[ServableState], clock: FakeClock, num_load_threads: int
) -> None:
    """A DataLossError (corrupt model) fails at once despite retries being configured."""
    loader = FakeLoader(load_error=DataLossError("checksum mismatch"))
    with make_manager(bus, clock, num_load_threads=num_load_threads, retries=5) as manager:
        manager.manage_servable(ServableData.of(V1, loader))
        with pytest.raises(DataLossError):
            manager.load_servable(V1).result(TIMEOUT_S)
    assert loader.load_calls == 1
    assert clock.pending_timers == 0


def test_load_succeeds_on_a_retry(
    bus: EventBus[ServableState], clock: FakeClock, num_load_threads: int
) -> None:
    """A load that fails once and then works ends AVAILABLE after one interval."""
    loader = FakeLoader("model", load_errors=[OSError("not yet")])
    with make_manager(bus, clock, num_load_threads=num_load_threads, retries=1) as manager:
        manager.manage_servable(ServableData.of(V1, loader))
        future = manager.load_servable(V1)
        wait_until(lambda: clock.pending_timers == 1)
        clock.advance(10)
        future.result(TIMEOUT_S)
        with manager.servable_handle(ServableRequest.latest("m")) as handle:
            assert handle.servable == "model"


def test_cancelled_retry_fails_at_once(
    bus: EventBus[ServableState], clock: FakeClock, num_load_threads: int
) -> None:
    """Cancelling a pending retry fails the load with CANCELLED without waiting the interval."""
    loader = FakeLoader(load_error=OSError("flaky"))
    with make_manager(bus, clock, num_load_threads=num_load_threads, retries=3) as manager:
        manager.manage_servable(ServableData.of(V1, loader))
        future = manager.load_servable(V1)
        wait_until(lambda: clock.pending_timers == 1)
        manager.cancel_load_servable_retry(V1)
        with pytest.raises(CancelledError):
            future.result(TIMEOUT_S)
    assert loader.load_calls == 1


def test_retry_wait_blocks_no_thread(bus: EventBus[ServableState], clock: FakeClock) -> None:
    """With one load thread, another servable loads while a failed one waits to retry."""
    failing = FakeLoader(load_error=OSError("flaky"))
    with make_manager(bus, clock, num_load_threads=1, retries=3) as manager:
        manager.manage_servable(ServableData.of(V1, failing))
        manager.load_servable(V1)
        wait_until(lambda: clock.pending_timers == 1)
        load(manager, ServableId("other", 1), FakeLoader("ok"))
        with manager.servable_handle(ServableRequest.latest("other")) as handle:
            assert handle.servable == "ok"


def test_load_that_does_not_fit_fails_without_loading(
    bus: EventBus[ServableState], clock: FakeClock, recorder: Recorder, num_load_threads: int
) -> None:
    """Over the limit with nothing in flight: RESOURCE_EXHAUSTED, load() never called."""
    big = FakeLoader(resource_estimate=ResourceAllocation.ram_bytes(150))
    small = FakeLoader("small", resource_estimate=ResourceAllocation.ram_bytes(50))
    limit = ResourceAllocation.ram_bytes(100)
    with make_manager(bus, clock, num_load_threads=num_load_threads, limit=limit) as manager:
        load(manager, ServableId("small", 1), small)
        manager.manage_servable(ServableData.of(V1, big))
        with pytest.raises(ResourceExhaustedError, match="Insufficient resources"):
            manager.load_servable(V1).result(TIMEOUT_S)
        with manager.servable_handle(ServableRequest.latest("small")) as handle:
            assert handle.servable == "small"
    assert big.load_calls == 0
    assert recorder.states(V1) == [ManagerState.START, ManagerState.END]
    assert any(
        e.id == V1 and e.health is not None and e.health.code is StatusCode.RESOURCE_EXHAUSTED
        for e in recorder.events
    )


def test_load_waits_for_an_unload_in_flight_near_the_limit(
    bus: EventBus[ServableState], clock: FakeClock
) -> None:
    """A load that fits only after a pending unload waits for it instead of failing."""
    limit = ResourceAllocation.ram_bytes(100)
    gate = threading.Event()
    old = FakeLoader("old", resource_estimate=ResourceAllocation.ram_bytes(80), unload_gate=gate)
    new = FakeLoader("new", resource_estimate=ResourceAllocation.ram_bytes(80))
    with make_manager(bus, clock, num_load_threads=1, num_unload_threads=1, limit=limit) as manager:
        load(manager, ServableId("a", 1), old)
        unloaded = manager.unload_servable(ServableId("a", 1))
        manager.manage_servable(ServableData.of(ServableId("b", 1), new))
        loaded = manager.load_servable(ServableId("b", 1))
        with pytest.raises(concurrent.futures.TimeoutError):
            loaded.result(0.05)
        assert new.load_calls == 0
        gate.set()
        unloaded.result(TIMEOUT_S)
        loaded.result(TIMEOUT_S)
        assert manager.list_available_servable_ids() == [ServableId("b", 1)]


def test_unload_waits_for_handles_taken_before(
    bus: EventBus[ServableState], clock: FakeClock, recorder: Recorder
) -> None:
    """An unload completes only after earlier handles are released; new lookups fail."""
    loader = FakeLoader("model")
    with make_manager(bus, clock, num_unload_threads=1) as manager:
        load(manager, V1, loader)
        handle = manager.servable_handle(ServableRequest.latest("m"))
        unloaded = manager.unload_servable(V1)
        wait_until(lambda: ManagerState.UNLOADING in recorder.states(V1))
        with pytest.raises(UnavailableError):
            manager.servable_handle(ServableRequest.latest("m"))
        with pytest.raises(concurrent.futures.TimeoutError):
            unloaded.result(0.05)
        assert loader.unload_calls == 0
        assert handle.servable == "model"
        handle.release()
        unloaded.result(TIMEOUT_S)
        assert loader.unload_calls == 1
        handle.release()  # idempotent


def test_close_unloads_everything_and_is_idempotent(
    bus: EventBus[ServableState], clock: FakeClock, recorder: Recorder, num_load_threads: int
) -> None:
    """close() unloads every serving version; a second close does nothing."""
    loaders = [FakeLoader() for _ in range(3)]
    manager = make_manager(bus, clock, num_load_threads=num_load_threads)
    for version, loader in enumerate(loaders, start=1):
        load(manager, ServableId("m", version), loader)
    manager.close()
    manager.close()
    assert [loader.unload_calls for loader in loaders] == [1, 1, 1]
    assert manager.list_available_servable_ids() == []
    with pytest.raises(FailedPreconditionError):
        manager.manage_servable(ServableData.of(ServableId("m", 9), FakeLoader()))


def test_close_cancels_pending_retries(bus: EventBus[ServableState], clock: FakeClock) -> None:
    """A load waiting to retry fails with CANCELLED when the manager closes."""
    manager = make_manager(bus, clock, num_load_threads=1, retries=3)
    manager.manage_servable(ServableData.of(V1, FakeLoader(load_error=OSError("flaky"))))
    future = manager.load_servable(V1)
    wait_until(lambda: clock.pending_timers == 1)
    manager.close()
    with pytest.raises(CancelledError):
        future.result(TIMEOUT_S)


class ServableRaises(Loader):
    """A loader that loads fine but whose servable() raises."""

    def __init__(self) -> None:
        self.unload_calls = 0

    def estimate_resources(self) -> ResourceAllocation:
        return ResourceAllocation.ram_bytes(10)

    def load(self) -> None:
        pass

    def unload(self) -> None:
        self.unload_calls += 1

    def servable(self) -> object:
        raise RuntimeError("boom")


def test_servable_raising_after_load_errors_and_unloads(
    bus: EventBus[ServableState], clock: FakeClock, recorder: Recorder, num_load_threads: int
) -> None:
    """A loader whose servable() raises ends in ERROR, is unloaded once, blocks no later load."""
    bad = ServableRaises()
    limit = ResourceAllocation.ram_bytes(100)
    with make_manager(bus, clock, num_load_threads=num_load_threads, limit=limit) as manager:
        manager.manage_servable(ServableData.of(V1, bad))
        with pytest.raises(UnknownError, match="RuntimeError: boom"):
            manager.load_servable(V1).result(TIMEOUT_S)
        assert bad.unload_calls == 1
        assert manager.list_available_servable_ids() == []
        too_big = FakeLoader(resource_estimate=ResourceAllocation.ram_bytes(200))
        manager.manage_servable(ServableData.of(V2, too_big))
        with pytest.raises(ResourceExhaustedError):
            manager.load_servable(V2).result(TIMEOUT_S)
    assert bad.unload_calls == 1  # once: closing the manager does not unload it again
    assert recorder.states(V1) == [ManagerState.START, ManagerState.LOADING, ManagerState.END]


def test_forgetting_a_new_version_publishes_end(manager: BasicManager, recorder: Recorder) -> None:
    """A version that stops being managed before it loaded is published END (no error)."""
    manager.manage_servable(ServableData.of(V1, FakeLoader()))
    manager.stop_managing_servable(V1)
    assert recorder.events == [
        ServableState(V1, ManagerState.START),
        ServableState(V1, ManagerState.END),
    ]


def test_load_pool_can_be_resized_while_serving(
    bus: EventBus[ServableState], clock: FakeClock
) -> None:
    """set_num_load_threads swaps the pool; later loads run on it, from 4 threads down to 0."""
    with make_manager(bus, clock, num_load_threads=4) as manager:
        load(manager, V1, FakeLoader())
        manager.set_num_load_threads(0)
        loader = FakeLoader()
        manager.manage_servable(ServableData.of(V2, loader))
        future = manager.load_servable(V2)
        assert future.done()  # synchronous now
        assert loader.load_calls == 1
        manager.set_num_load_threads(2)
        load(manager, V3, FakeLoader())
        assert manager.list_available_servable_ids() == [V1, V2, V3]


def test_release_callback_runs_once_on_release(manager: BasicManager) -> None:
    """A handle's release callback runs exactly once, when it is released."""
    load(manager, V1, FakeLoader())
    released: list[int] = []
    handle = manager.servable_handle(ServableRequest.latest("m"))
    handle.add_release_callback(lambda: released.append(1))
    assert released == []
    handle.release()
    handle.release()
    assert released == [1]
