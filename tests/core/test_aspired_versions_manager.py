"""AspiredVersionsManager: following aspired versions, stepped by hand and threaded."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from servinglib.core.aspired_version_policy import AspiredVersionPolicy
from servinglib.core.aspired_versions_manager import AspiredVersionsManager
from servinglib.core.availability_preserving_policy import AvailabilityPreservingPolicy
from servinglib.core.basic_manager import ManagerOptions
from servinglib.core.event_bus import EventBus
from servinglib.core.loader import Loader
from servinglib.core.loader_harness import HarnessState, LoadRetryOptions
from servinglib.core.resource_preserving_policy import ResourcePreservingPolicy
from servinglib.core.resource_tracker import ResourceTracker
from servinglib.core.resources import ResourceAllocation
from servinglib.core.servable_data import ServableData
from servinglib.core.servable_id import ServableId
from servinglib.core.servable_request import ServableRequest
from servinglib.core.servable_state import ManagerState, ServableState
from servinglib.core.servable_state_monitor import ServableStateMonitor
from servinglib.errors import DataLossError, InvalidArgumentError, ServingError, StatusCode
from servinglib.testing import FakeClock, FakeLoader, LiveCounter, run_until, wait_for_state

V1 = ServableId("m", 1)
V2 = ServableId("m", 2)
V3 = ServableId("m", 3)


class Harness:
    """A manager stepped by hand, with its event log and fake clock."""

    def __init__(
        self,
        policy: AspiredVersionPolicy,
        *,
        num_load_threads: int = 0,
        num_unload_threads: int = 0,
        retries: int = 0,
        limit: ResourceAllocation | None = None,
        reload_errors: bool = False,
    ) -> None:
        self.bus: EventBus[ServableState] = EventBus()
        self.events: list[ServableState] = []
        self.bus.subscribe(self.events.append)
        self.clock = FakeClock()
        self.monitor = ServableStateMonitor(self.bus)
        options = ManagerOptions(
            num_load_threads=num_load_threads,
            num_unload_threads=num_unload_threads,
            load_retry=LoadRetryOptions(max_num_load_retries=retries, load_retry_interval_s=5),
        )
        self.manager = AspiredVersionsManager(
            policy,
            options,
            manage_state_interval_s=None,
            enable_reload_servables_with_error=reload_errors,
            resource_tracker=ResourceTracker(limit) if limit is not None else None,
            event_bus=self.bus,
            clock=self.clock,
        )

    def aspire(self, name: str, **loaders: Loader) -> None:
        """Aspires versions given as v<N>=loader."""
        self.manager.set_aspired_versions(
            name,
            [
                ServableData.of(ServableId(name, int(k[1:])), loader)
                for k, loader in loaders.items()
            ],
        )

    def settle(self) -> None:
        """Steps until nothing changes and no load or unload is in flight."""

        def idle() -> bool:
            return not self.manager.run_once() and all(
                s.state in _RESTING
                for name in self.manager.basic_manager.managed_servable_names()
                for s in self.manager.aspired_snapshots(name)
            )

        run_until(self.manager, idle)

    def state(self, servable_id: ServableId) -> ManagerState | None:
        found = self.monitor.get_state(servable_id)
        return found.manager_state if found is not None else None

    def health(self, servable_id: ServableId) -> ServingError:
        """The error the servable's last state carries (it must carry one)."""
        found = self.monitor.get_state(servable_id)
        assert found is not None
        assert found.health is not None
        return found.health

    def served(self, name: str = "m") -> object:
        with self.manager.servable_handle(ServableRequest.latest(name)) as handle:
            return handle.servable

    def order(self) -> list[tuple[int, ManagerState]]:
        return [(e.id.version, e.manager_state) for e in self.events]


_RESTING = frozenset(
    {HarnessState.NEW, HarnessState.READY, HarnessState.ERROR, HarnessState.DISABLED}
)


@pytest.fixture(params=[0, 2], ids=["sync-loads", "2-load-threads"])
def num_load_threads(request: pytest.FixtureRequest) -> int:
    return int(request.param)


@pytest.fixture
def available(num_load_threads: int) -> Iterator[Harness]:
    harness = Harness(
        AvailabilityPreservingPolicy(), num_load_threads=num_load_threads, num_unload_threads=1
    )
    yield harness
    harness.manager.close()


@pytest.fixture
def preserving(num_load_threads: int) -> Iterator[Harness]:
    harness = Harness(
        ResourcePreservingPolicy(), num_load_threads=num_load_threads, num_unload_threads=1
    )
    yield harness
    harness.manager.close()


def test_aspired_version_loads_and_serves(available: Harness) -> None:
    """A version in the aspired set is loaded and served."""
    available.aspire("m", v1=FakeLoader("one"))
    available.settle()
    assert available.served() == "one"
    assert available.order() == [
        (1, ManagerState.START),
        (1, ManagerState.LOADING),
        (1, ManagerState.AVAILABLE),
    ]


def test_availability_preserving_swap_loads_new_before_unloading_old(
    available: Harness,
) -> None:
    """Swap 1 → 2: version 2 is AVAILABLE before version 1 starts UNLOADING; both were live."""
    counter = LiveCounter()
    available.aspire("m", v1=FakeLoader("one", live_counter=counter))
    available.settle()
    available.aspire("m", v2=FakeLoader("two", live_counter=counter))
    available.settle()
    order = available.order()
    assert order.index((2, ManagerState.AVAILABLE)) < order.index((1, ManagerState.UNLOADING))
    assert available.served() == "two"
    assert available.state(V1) is ManagerState.END
    assert (counter.peak, counter.live) == (2, 1)


def test_resource_preserving_swap_unloads_old_before_loading_new(preserving: Harness) -> None:
    """Swap 1 → 2: version 1 reaches END before version 2 starts LOADING; never two live."""
    counter = LiveCounter()
    preserving.aspire("m", v1=FakeLoader("one", live_counter=counter))
    preserving.settle()
    preserving.aspire("m", v2=FakeLoader("two", live_counter=counter))
    preserving.settle()
    order = preserving.order()
    assert order.index((1, ManagerState.END)) < order.index((2, ManagerState.LOADING))
    assert preserving.served() == "two"
    assert (counter.peak, counter.live) == (1, 1)


def test_empty_aspired_set_unloads_everything(available: Harness) -> None:
    """An empty aspired set unloads every version of the name, and they are forgotten."""
    available.aspire("m", v1=FakeLoader(), v2=FakeLoader())
    available.settle()
    available.aspire("m")
    available.settle()
    assert available.manager.list_available_servable_ids() == []
    assert available.state(V1) is ManagerState.END
    assert available.state(V2) is ManagerState.END
    assert available.manager.aspired_snapshots("m") == []


def test_omitted_versions_unload_and_aspired_ones_stay(available: Harness) -> None:
    """A version left out is unloaded; one still aspired keeps its loader, never reloaded."""
    one, two = FakeLoader("one"), FakeLoader("two")
    available.aspire("m", v1=one, v2=two)
    available.settle()
    available.aspire("m", v2=FakeLoader("another two"))
    available.settle()
    available.aspire("m", v2=FakeLoader("yet another two"))
    available.settle()
    assert available.manager.list_available_servable_ids() == [V2]
    assert (one.unload_calls, two.load_calls, two.unload_calls) == (1, 1, 0)
    assert available.served() == "two"


def test_one_action_per_name_per_step_unloads_first() -> None:
    """A step starts each changed name's next action, unloads before loads; one per name."""
    harness = Harness(AvailabilityPreservingPolicy())
    harness.aspire("a", v1=FakeLoader())
    harness.settle()
    harness.aspire("a")
    harness.aspire("b", v1=FakeLoader(), v2=FakeLoader())
    start = len(harness.events)
    harness.manager.run_once()  # 0 load and unload threads: both actions run in the step

    def changes() -> list[tuple[str, int, ManagerState]]:
        return [
            (e.id.name, e.id.version, e.manager_state)
            for e in harness.events[start:]
            if e.manager_state in {ManagerState.UNLOADING, ManagerState.LOADING}
        ]

    assert changes() == [("a", 1, ManagerState.UNLOADING), ("b", 2, ManagerState.LOADING)]
    harness.settle()
    assert changes()[2:] == [("b", 1, ManagerState.LOADING)]


def test_failed_version_keeps_the_old_one_serving(available: Harness) -> None:
    """A new version whose load fails leaves the previous version serving."""
    available.aspire("m", v1=FakeLoader("one"))
    available.settle()
    available.aspire("m", v1=FakeLoader(), v2=FakeLoader(load_error=DataLossError("corrupt")))
    available.settle()
    assert available.served() == "one"
    assert available.health(V2).code is StatusCode.DATA_LOSS


def test_error_data_from_the_source_is_recorded(available: Harness) -> None:
    """An aspired version that arrives as an error ends in END with that error."""
    error = InvalidArgumentError("no saved_model.pb in /models/m/3")
    available.manager.set_aspired_versions("m", [ServableData.failed(V3, error)])
    available.settle()
    assert available.monitor.get_state(V3) == ServableState(V3, ManagerState.END, error)


def test_version_in_error_stays_in_error_by_default() -> None:
    """Re-aspiring a version in ERROR does not reload it unless enabled."""
    harness = Harness(AvailabilityPreservingPolicy())
    harness.aspire("m", v1=FakeLoader(load_error=DataLossError("corrupt")))
    harness.settle()
    fixed = FakeLoader("fixed")
    harness.aspire("m", v1=fixed)
    harness.settle()
    assert fixed.load_calls == 0
    assert harness.state(V1) is ManagerState.END
    harness.manager.close()


def test_version_in_error_reloads_when_enabled() -> None:
    """With enable_reload_servables_with_error, a re-aspired errored version gets the new loader."""
    harness = Harness(AvailabilityPreservingPolicy(), reload_errors=True)
    harness.aspire("m", v1=FakeLoader(load_error=DataLossError("corrupt")))
    harness.settle()
    harness.aspire("m", v1=FakeLoader("fixed"))
    harness.settle()
    assert harness.served() == "fixed"
    harness.manager.close()


def test_failed_version_heals_when_offered_with_another_revision(available: Harness) -> None:
    """A version in ERROR re-offered with a new revision loads its new loader."""
    available.aspire("m", v1=FakeLoader("one"))
    available.settle()
    broken = ServableData.of(V2, FakeLoader(load_error=DataLossError("truncated")))
    available.manager.set_aspired_versions("m", [ServableData.of(V1, FakeLoader()), broken])
    available.settle()
    assert available.health(V2).code is StatusCode.DATA_LOSS
    fixed = ServableData(V2, data=FakeLoader("two"), revision=1)
    available.manager.set_aspired_versions("m", [ServableData.of(V1, FakeLoader()), fixed])
    available.settle()
    assert available.served() == "two"


def test_same_revision_leaves_a_failed_version_alone(available: Harness) -> None:
    """Re-offering a failed version with its old revision does not load it again."""
    available.manager.set_aspired_versions(
        "m", [ServableData(V1, data=FakeLoader(load_error=DataLossError("x")), revision=3)]
    )
    available.settle()
    again = FakeLoader("again")
    available.manager.set_aspired_versions("m", [ServableData(V1, data=again, revision=3)])
    available.settle()
    assert again.load_calls == 0
    assert available.health(V1).code is StatusCode.DATA_LOSS


def test_new_revision_cuts_a_retry_wait_short(num_load_threads: int) -> None:
    """A version waiting to retry, offered with a new revision, loads the new loader at once."""
    harness = Harness(
        AvailabilityPreservingPolicy(), num_load_threads=max(num_load_threads, 1), retries=5
    )
    flaky = FakeLoader(load_error=OSError("half-copied"))
    harness.aspire("m", v1=flaky)
    run_until(harness.manager, lambda: harness.clock.pending_timers == 1)
    harness.manager.set_aspired_versions(
        "m", [ServableData(V1, data=FakeLoader("healed"), revision=1)]
    )
    harness.settle()
    assert harness.served() == "healed"
    assert flaky.load_calls == 1
    harness.manager.close()


def test_new_revision_of_a_serving_version_changes_nothing(available: Harness) -> None:
    """A serving version re-offered with a new revision keeps serving its loaded servable."""
    available.aspire("m", v1=FakeLoader("one"))
    available.settle()
    other = FakeLoader("other")
    available.manager.set_aspired_versions("m", [ServableData(V1, data=other, revision=1)])
    available.settle()
    assert available.served() == "one"
    assert other.load_calls == 0


def test_unaspired_version_cancels_its_retries() -> None:
    """A version dropped from the aspired set while waiting to retry fails CANCELLED, no retry."""
    harness = Harness(AvailabilityPreservingPolicy(), num_load_threads=1, retries=5)
    flaky = FakeLoader(load_error=OSError("storage blip"))
    harness.aspire("m", v1=flaky)
    run_until(harness.manager, lambda: harness.clock.pending_timers == 1)
    harness.aspire("m")
    harness.settle()
    assert harness.health(V1).code is StatusCode.CANCELLED
    assert flaky.load_calls == 1
    assert harness.manager.aspired_snapshots("m") == []
    harness.manager.close()


def test_retries_follow_the_clock() -> None:
    """A flaky load is retried after each interval and then serves."""
    harness = Harness(AvailabilityPreservingPolicy(), num_load_threads=1, retries=2)
    flaky = FakeLoader("ok", load_errors=[OSError("blip"), OSError("blip")])
    harness.aspire("m", v1=flaky)
    run_until(harness.manager, lambda: harness.clock.pending_timers == 1)
    harness.clock.advance(5)
    run_until(harness.manager, lambda: flaky.load_calls == 2 and harness.clock.pending_timers == 1)
    harness.clock.advance(5)
    wait_for_state(harness.monitor, V1, ManagerState.AVAILABLE)
    assert flaky.load_calls == 3
    harness.manager.close()


def test_reaspired_version_waits_for_its_unload_to_finish() -> None:
    """Re-aspiring a version still unloading is deferred, then loads the new loader."""
    harness = Harness(AvailabilityPreservingPolicy(), num_unload_threads=1)
    gate = threading.Event()
    harness.aspire("m", v1=FakeLoader("old", unload_gate=gate))
    harness.settle()
    harness.aspire("m")
    run_until(harness.manager, lambda: harness.state(V1) is ManagerState.UNLOADING)
    harness.aspire("m", v1=FakeLoader("new"))
    for _ in range(5):
        harness.manager.run_once()
    assert harness.state(V1) is ManagerState.UNLOADING
    gate.set()
    harness.settle()
    assert harness.served() == "new"
    harness.manager.close()


def test_resource_exhausted_version_ends_in_error_others_unaffected() -> None:
    """A version that cannot fit ends RESOURCE_EXHAUSTED without loading; others serve on."""
    harness = Harness(AvailabilityPreservingPolicy(), limit=ResourceAllocation.ram_bytes(100))
    harness.aspire(
        "small", v1=FakeLoader("small", resource_estimate=ResourceAllocation.ram_bytes(60))
    )
    harness.settle()
    big = FakeLoader(resource_estimate=ResourceAllocation.ram_bytes(60))
    harness.aspire("big", v1=big)
    harness.settle()
    assert harness.health(ServableId("big", 1)).code is StatusCode.RESOURCE_EXHAUSTED
    assert big.load_calls == 0
    assert harness.served("small") == "small"
    harness.manager.close()


@pytest.mark.parametrize("policy", [AvailabilityPreservingPolicy(), ResourcePreservingPolicy()])
def test_swapping_models_near_the_limit_succeeds(policy: AspiredVersionPolicy) -> None:
    """Replacing model a by b when only one fits: b waits for a's unload and then loads."""
    harness = Harness(
        policy,
        num_load_threads=1,
        num_unload_threads=1,
        limit=ResourceAllocation.ram_bytes(100),
    )
    gate = threading.Event()
    harness.aspire(
        "a",
        v1=FakeLoader("a", resource_estimate=ResourceAllocation.ram_bytes(80), unload_gate=gate),
    )
    harness.settle()
    harness.aspire("a")
    harness.aspire("b", v1=FakeLoader("b", resource_estimate=ResourceAllocation.ram_bytes(80)))
    run_until(
        harness.manager,
        lambda: (
            harness.state(ServableId("a", 1)) is ManagerState.UNLOADING
            and harness.state(ServableId("b", 1)) is ManagerState.START
        ),
    )
    harness.manager.run_once()  # issues b's load, which waits for a's unload
    gate.set()
    harness.settle()
    assert harness.served("b") == "b"
    found = harness.monitor.get_state(ServableId("b", 1))
    assert found is not None
    assert found.ok
    harness.manager.close()


@pytest.mark.parametrize(
    "versions",
    [
        [ServableData.of(ServableId("other", 1), FakeLoader())],
        [ServableData.of(V1, FakeLoader()), ServableData.of(V1, FakeLoader())],
    ],
    ids=["other-name", "repeated-version"],
)
def test_malformed_aspired_versions_are_rejected(versions: list[ServableData[Loader]]) -> None:
    """Items naming another servable, or a version twice, are rejected with INVALID_ARGUMENT."""
    harness = Harness(AvailabilityPreservingPolicy())
    with pytest.raises(InvalidArgumentError):
        harness.manager.set_aspired_versions("m", versions)
    harness.manager.close()


def test_manage_state_thread_picks_up_changes_without_stepping() -> None:
    """With a manage-state thread, aspired versions load and swap with no run_once calls."""
    bus: EventBus[ServableState] = EventBus()
    monitor = ServableStateMonitor(bus)
    with AspiredVersionsManager(
        AvailabilityPreservingPolicy(),
        ManagerOptions(num_load_threads=2, num_unload_threads=1),
        manage_state_interval_s=60,  # long: the pick-up must come from the wake-up
        event_bus=bus,
    ) as manager:
        manager.set_aspired_versions("m", [ServableData.of(V1, FakeLoader("one"))])
        wait_for_state(monitor, V1, ManagerState.AVAILABLE)
        manager.set_aspired_versions("m", [ServableData.of(V2, FakeLoader("two"))])
        wait_for_state(monitor, V1, ManagerState.END)
        with manager.servable_handle(ServableRequest.latest("m")) as handle:
            assert handle.servable == "two"


def test_handles_never_fail_while_versions_swap() -> None:
    """Threads taking handles in a loop see no failed lookup while versions swap underneath."""
    bus: EventBus[ServableState] = EventBus()
    monitor = ServableStateMonitor(bus)
    failures: list[ServingError] = []
    lookups = [0]
    stop = threading.Event()

    def reader(manager: AspiredVersionsManager) -> None:
        request = ServableRequest.latest("m")
        while not stop.is_set():
            try:
                with manager.servable_handle(request):
                    lookups[0] += 1
            except ServingError as error:
                failures.append(error)

    with AspiredVersionsManager(
        AvailabilityPreservingPolicy(),
        ManagerOptions(num_load_threads=2, num_unload_threads=1),
        manage_state_interval_s=0.01,
        event_bus=bus,
    ) as manager:
        manager.set_aspired_versions("m", [ServableData.of(V1, FakeLoader(1))])
        wait_for_state(monitor, V1, ManagerState.AVAILABLE)
        readers = [threading.Thread(target=reader, args=(manager,)) for _ in range(3)]
        for thread in readers:
            thread.start()
        try:
            for version in range(2, 22):
                new = ServableId("m", version)
                manager.set_aspired_versions("m", [ServableData.of(new, FakeLoader(version))])
                wait_for_state(monitor, new, ManagerState.AVAILABLE)
                wait_for_state(monitor, ServableId("m", version - 1), ManagerState.END)
        finally:
            stop.set()
            for thread in readers:
                thread.join(10)
    assert failures == []
    assert lookups[0] > 0


def test_version_dropped_while_new_is_forgotten_and_can_come_back() -> None:
    """A version un-aspired before it loaded ends and is forgotten; aspiring it later loads."""
    harness = Harness(AvailabilityPreservingPolicy())
    harness.aspire("m", v1=FakeLoader(load_error=DataLossError("corrupt")), v2=FakeLoader())
    harness.manager.run_once()  # applies the request, then loads v2 (the highest) only
    harness.aspire("m", v2=FakeLoader())
    harness.settle()
    assert harness.state(V1) is ManagerState.END
    assert [s.id for s in harness.manager.aspired_snapshots("m")] == [V2]
    harness.aspire("m", v1=FakeLoader("one again"), v2=FakeLoader())
    harness.settle()
    assert harness.manager.list_available_servable_ids() == [V1, V2]
    harness.manager.close()


def test_rollback_to_the_version_still_serving() -> None:
    """After a new version fails, aspiring the old (still serving) one again keeps it, aspired."""
    harness = Harness(AvailabilityPreservingPolicy())
    one = FakeLoader("one")
    harness.aspire("m", v1=one)
    harness.settle()
    harness.aspire("m", v2=FakeLoader(load_error=DataLossError("corrupt")))
    harness.settle()
    assert harness.served() == "one"  # availability preserved: v1 still serves
    harness.aspire("m", v1=FakeLoader("another one"))
    harness.settle()
    assert [(s.id, s.is_aspired) for s in harness.manager.aspired_snapshots("m")] == [(V1, True)]
    assert harness.served() == "one"
    assert one.load_calls == 1
    harness.manager.close()


def test_load_waiting_for_room_does_not_block_a_retry() -> None:
    """With one load thread, a load parked for resources leaves the thread to another's retry."""
    harness = Harness(
        AvailabilityPreservingPolicy(),
        num_load_threads=1,
        retries=1,
        limit=ResourceAllocation.ram_bytes(100),
    )
    flaky = FakeLoader(
        "a", resource_estimate=ResourceAllocation.ram_bytes(60), load_errors=[OSError("blip")]
    )
    big = FakeLoader("b", resource_estimate=ResourceAllocation.ram_bytes(60))
    harness.aspire("a", v1=flaky)
    harness.aspire("b", v1=big)
    run_until(harness.manager, lambda: harness.clock.pending_timers == 1)
    harness.manager.run_once()  # b's load: does not fit while a holds its reservation
    harness.clock.advance(5)  # a's retry must get the load thread
    wait_for_state(harness.monitor, ServableId("a", 1), ManagerState.AVAILABLE)
    harness.settle()
    assert harness.health(ServableId("b", 1)).code is StatusCode.RESOURCE_EXHAUSTED
    assert big.load_calls == 0
    harness.manager.close()
