"""Tests for servinglib.core.servable_state_monitor: queries over published states, and waits."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping

import pytest

from servinglib.core.clock import Clock, Timer
from servinglib.core.event_bus import EventBus
from servinglib.core.servable_id import ServableId
from servinglib.core.servable_request import ServableRequest
from servinglib.core.servable_state import ManagerState, ServableState
from servinglib.core.servable_state_monitor import ServableStateAndTime, ServableStateMonitor
from servinglib.core.storage_condition import StorageCondition
from servinglib.errors import ServingError, UnavailableError

M = ManagerState
TIMEOUT_S = 10.0
# A wait that is meant to time out: short, since the test expects it to expire.
EXPIRING_S = 0.05


class SettableClock(Clock):
    """A clock whose now() is whatever the test last set; the monitor never calls call_later."""

    def __init__(self, now_s: float = 0.0) -> None:
        self.now_s = now_s

    def now(self) -> float:
        return self.now_s

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> Timer:
        raise NotImplementedError("the monitor does not schedule callbacks")


def sid(version: int, name: str = "m") -> ServableId:
    return ServableId(name, version)


class Recorder:
    """A notify function that records each call and the thread it ran on."""

    def __init__(self) -> None:
        self.calls: list[tuple[bool, dict[ServableId, ManagerState]]] = []
        self.threads: list[threading.Thread] = []

    def __call__(self, reached: bool, states: Mapping[ServableId, ManagerState]) -> None:
        self.calls.append((reached, dict(states)))
        self.threads.append(threading.current_thread())


@pytest.fixture
def bus() -> EventBus[ServableState]:
    return EventBus()


@pytest.fixture
def clock() -> SettableClock:
    return SettableClock(100.0)


@pytest.fixture
def monitor(bus: EventBus[ServableState], clock: SettableClock) -> Iterator[ServableStateMonitor]:
    monitor = ServableStateMonitor(bus, clock=clock)
    yield monitor
    monitor.close()


def publish(
    bus: EventBus[ServableState],
    servable_id: ServableId,
    state: ManagerState,
    health: ServingError | None = None,
) -> None:
    bus.publish(ServableState(servable_id, state, health))


def test_unknown_servable_has_no_state(monitor: ServableStateMonitor) -> None:
    """get_state and get_state_and_time answer None for a version never published."""
    assert monitor.get_state(sid(1)) is None
    assert monitor.get_state_and_time(sid(1)) is None
    assert monitor.get_version_states("m") == {}
    assert monitor.get_all_servable_states() == {}


def test_get_state_is_the_last_published(
    bus: EventBus[ServableState], monitor: ServableStateMonitor, clock: SettableClock
) -> None:
    """get_state returns the latest event of that version, timed by the monitor's clock."""
    publish(bus, sid(1), M.START)
    clock.now_s = 101.5
    publish(bus, sid(1), M.LOADING)

    assert monitor.get_state(sid(1)) == ServableState(sid(1), M.LOADING)
    assert monitor.get_state_and_time(sid(1)) == ServableStateAndTime(
        ServableState(sid(1), M.LOADING), 101.5
    )


def test_get_version_states_by_version(
    bus: EventBus[ServableState], monitor: ServableStateMonitor
) -> None:
    """get_version_states maps each seen version of one name to its last state."""
    publish(bus, sid(1), M.AVAILABLE)
    publish(bus, sid(2), M.LOADING)
    publish(bus, sid(1, "other"), M.AVAILABLE)

    states = monitor.get_version_states("m")

    assert {v: s.state.manager_state for v, s in states.items()} == {1: M.AVAILABLE, 2: M.LOADING}


def test_get_all_servable_states_is_a_copy(
    bus: EventBus[ServableState], monitor: ServableStateMonitor
) -> None:
    """get_all_servable_states lists every name and version; changing the result changes nothing."""
    publish(bus, sid(1), M.AVAILABLE)
    publish(bus, sid(3, "other"), M.END)

    everything = monitor.get_all_servable_states()
    assert {name: set(versions) for name, versions in everything.items()} == {
        "m": {1},
        "other": {3},
    }
    everything["m"].clear()
    del everything["other"]

    assert set(monitor.get_all_servable_states()) == {"m", "other"}
    assert set(monitor.get_version_states("m")) == {1}


def test_get_live_servable_states_leaves_out_ended_versions(
    bus: EventBus[ServableState], monitor: ServableStateMonitor
) -> None:
    """get_live_servable_states omits versions in END, and names with no live version."""
    publish(bus, sid(1), M.END)
    publish(bus, sid(2), M.AVAILABLE)
    publish(bus, sid(3), M.UNLOADING)
    publish(bus, sid(1, "gone"), M.END)

    live = monitor.get_live_servable_states()

    assert {name: set(versions) for name, versions in live.items()} == {"m": {2, 3}}


def test_get_available_servable_states(
    bus: EventBus[ServableState], monitor: ServableStateMonitor
) -> None:
    """get_available_servable_states is the set of ids now AVAILABLE."""
    publish(bus, sid(1), M.AVAILABLE)
    publish(bus, sid(2), M.AVAILABLE)
    publish(bus, sid(2), M.UNLOADING)
    publish(bus, sid(7, "other"), M.AVAILABLE)
    publish(bus, sid(8, "other"), M.LOADING)

    assert monitor.get_available_servable_states() == {sid(1), sid(7, "other")}


def test_versions_in_names_the_versions_of_one_model_in_the_states_asked(
    bus: EventBus[ServableState], monitor: ServableStateMonitor
) -> None:
    """versions_in is the versions of one name whose last state is among those given."""
    publish(bus, sid(1), M.AVAILABLE)
    publish(bus, sid(2), M.AVAILABLE)
    publish(bus, sid(2), M.UNLOADING)
    publish(bus, sid(3), M.END)
    publish(bus, sid(4, "other"), M.AVAILABLE)

    assert monitor.versions_in("m", M.AVAILABLE) == {1}
    assert monitor.versions_in("m", M.AVAILABLE, M.UNLOADING) == {1, 2}
    assert monitor.versions_in("m") == set()
    assert monitor.versions_in("unknown", M.AVAILABLE) == set()


def test_forget_unloaded_keeps_errors_and_live_versions(
    bus: EventBus[ServableState], monitor: ServableStateMonitor
) -> None:
    """forget_unloaded_servable_states drops cleanly ENDed versions, keeps failed and live ones."""
    failure = UnavailableError("load failed")
    publish(bus, sid(1), M.END)
    publish(bus, sid(2), M.END, failure)
    publish(bus, sid(3), M.AVAILABLE)
    publish(bus, sid(1, "gone"), M.END)

    monitor.forget_unloaded_servable_states()

    assert monitor.get_state(sid(1)) is None
    assert monitor.get_state(sid(2)) == ServableState(sid(2), M.END, failure)
    assert monitor.get_state(sid(3)) == ServableState(sid(3), M.AVAILABLE)
    assert set(monitor.get_all_servable_states()) == {"m"}


def test_bounded_log_is_off_by_default(
    bus: EventBus[ServableState], monitor: ServableStateMonitor
) -> None:
    """With the default max_count_log_events of 0 the log keeps nothing."""
    publish(bus, sid(1), M.START)

    assert monitor.get_bounded_log() == []


def test_bounded_log_keeps_the_last_events(
    bus: EventBus[ServableState], clock: SettableClock
) -> None:
    """The log holds the last max_count_log_events events, oldest first, with their times."""
    monitor = ServableStateMonitor(bus, max_count_log_events=2, clock=clock)
    for time_s, state in [(1.0, M.START), (2.0, M.LOADING), (3.0, M.AVAILABLE)]:
        clock.now_s = time_s
        publish(bus, sid(1), state)

    assert monitor.get_bounded_log() == [
        ServableStateAndTime(ServableState(sid(1), M.LOADING), 2.0),
        ServableStateAndTime(ServableState(sid(1), M.AVAILABLE), 3.0),
    ]


def test_close_stops_listening(bus: EventBus[ServableState], clock: SettableClock) -> None:
    """After close() the monitor ignores new events but still answers from what it saw."""
    monitor = ServableStateMonitor(bus, clock=clock)
    publish(bus, sid(1), M.LOADING)

    monitor.close()
    publish(bus, sid(1), M.AVAILABLE)

    assert monitor.get_state(sid(1)) == ServableState(sid(1), M.LOADING)


def test_specific_version_settles_in_goal(
    bus: EventBus[ServableState], monitor: ServableStateMonitor
) -> None:
    """A specific request settles once its version reaches the goal, notifying on that thread."""
    recorder = Recorder()
    monitor.notify_when_servables_reach_state(
        [ServableRequest.specific("m", 1)], M.AVAILABLE, recorder
    )
    publish(bus, sid(1), M.START)
    publish(bus, sid(1), M.LOADING)
    assert recorder.calls == []

    publish(bus, sid(1), M.AVAILABLE)

    assert recorder.calls == [(True, {sid(1): M.AVAILABLE})]
    assert recorder.threads == [threading.current_thread()]


def test_specific_version_settles_in_end_unreached(
    bus: EventBus[ServableState], monitor: ServableStateMonitor
) -> None:
    """A specific version that ENDs (e.g. its load failed) settles with reached False."""
    recorder = Recorder()
    monitor.notify_when_servables_reach_state(
        [ServableRequest.specific("m", 1)], M.AVAILABLE, recorder
    )

    publish(bus, sid(1), M.END, UnavailableError("load failed"))

    assert recorder.calls == [(False, {sid(1): M.END})]


def test_other_versions_do_not_settle_a_specific_request(
    bus: EventBus[ServableState], monitor: ServableStateMonitor
) -> None:
    """Events of other versions or names leave a specific request waiting."""
    recorder = Recorder()
    monitor.notify_when_servables_reach_state(
        [ServableRequest.specific("m", 1)], M.AVAILABLE, recorder
    )

    publish(bus, sid(2), M.AVAILABLE)
    publish(bus, sid(1, "other"), M.AVAILABLE)

    assert recorder.calls == []


def test_already_settled_notifies_before_returning(
    bus: EventBus[ServableState], monitor: ServableStateMonitor
) -> None:
    """A request settled at registration is notified at once, on the caller's thread."""
    publish(bus, sid(1), M.AVAILABLE)
    recorder = Recorder()

    monitor.notify_when_servables_reach_state(
        [ServableRequest.specific("m", 1)], M.AVAILABLE, recorder
    )

    assert recorder.calls == [(True, {sid(1): M.AVAILABLE})]
    assert recorder.threads == [threading.current_thread()]


def test_notifies_only_once(bus: EventBus[ServableState], monitor: ServableStateMonitor) -> None:
    """A settled request is notified once, whatever is published afterwards."""
    recorder = Recorder()
    monitor.notify_when_servables_reach_state(
        [ServableRequest.specific("m", 1)], M.AVAILABLE, recorder
    )

    publish(bus, sid(1), M.AVAILABLE)
    publish(bus, sid(1), M.UNLOADING)
    publish(bus, sid(1), M.AVAILABLE)

    assert len(recorder.calls) == 1


def test_latest_settles_when_any_version_reaches_goal(
    bus: EventBus[ServableState], monitor: ServableStateMonitor
) -> None:
    """A latest request settles on the first version in the goal, not waiting for higher ones."""
    publish(bus, sid(1), M.LOADING)
    publish(bus, sid(2), M.LOADING)
    recorder = Recorder()
    monitor.notify_when_servables_reach_state([ServableRequest.latest("m")], M.AVAILABLE, recorder)

    publish(bus, sid(1), M.AVAILABLE)

    assert recorder.calls == [(True, {sid(1): M.AVAILABLE})]


def test_latest_reports_highest_and_earliest_lowest(
    bus: EventBus[ServableState], monitor: ServableStateMonitor
) -> None:
    """Among versions in the goal, latest reports the highest and earliest the lowest."""
    for version in (3, 1, 2):
        publish(bus, sid(version), M.AVAILABLE)
    publish(bus, sid(4), M.LOADING)
    latest, earliest = Recorder(), Recorder()

    monitor.notify_when_servables_reach_state([ServableRequest.latest("m")], M.AVAILABLE, latest)
    monitor.notify_when_servables_reach_state(
        [ServableRequest.earliest("m")], M.AVAILABLE, earliest
    )

    assert latest.calls == [(True, {sid(3): M.AVAILABLE})]
    assert earliest.calls == [(True, {sid(1): M.AVAILABLE})]


def test_latest_waits_for_a_first_version(
    bus: EventBus[ServableState], monitor: ServableStateMonitor
) -> None:
    """A latest request for a name never seen waits until a version of it reaches the goal."""
    recorder = Recorder()
    monitor.notify_when_servables_reach_state([ServableRequest.latest("m")], M.AVAILABLE, recorder)
    assert recorder.calls == []

    publish(bus, sid(5), M.AVAILABLE)

    assert recorder.calls == [(True, {sid(5): M.AVAILABLE})]


def test_latest_settles_unreached_when_every_version_ends(
    bus: EventBus[ServableState], monitor: ServableStateMonitor
) -> None:
    """When every known version is in END, a latest request settles unreached on the highest."""
    publish(bus, sid(1), M.END)
    publish(bus, sid(2), M.LOADING)
    recorder = Recorder()
    monitor.notify_when_servables_reach_state([ServableRequest.latest("m")], M.AVAILABLE, recorder)
    assert recorder.calls == []

    publish(bus, sid(2), M.END, UnavailableError("load failed"))

    assert recorder.calls == [(False, {sid(2): M.END})]


def test_several_requests_settle_together(
    bus: EventBus[ServableState], monitor: ServableStateMonitor
) -> None:
    """Several requests notify once all settle; reached only if every one is in the goal."""
    recorder = Recorder()
    requests = [ServableRequest.specific("m", 1), ServableRequest.latest("other")]
    monitor.notify_when_servables_reach_state(requests, M.AVAILABLE, recorder)

    publish(bus, sid(1), M.AVAILABLE)
    assert recorder.calls == []
    publish(bus, sid(4, "other"), M.END)

    assert recorder.calls == [(False, {sid(1): M.AVAILABLE, sid(4, "other"): M.END})]


def test_wait_returns_at_once_when_settled(
    bus: EventBus[ServableState], monitor: ServableStateMonitor
) -> None:
    """wait_until_servables_reach_state returns without blocking when already settled."""
    publish(bus, sid(1), M.AVAILABLE)

    result = monitor.wait_until_servables_reach_state(
        [ServableRequest.specific("m", 1)], M.AVAILABLE, timeout_s=TIMEOUT_S
    )

    assert result == (True, {sid(1): M.AVAILABLE})


@pytest.mark.parametrize("unsettled_first", [False, True], ids=["settled-first", "settled-last"])
def test_wait_timeout_returns_partial_and_leaves_no_waiter(
    bus: EventBus[ServableState], monitor: ServableStateMonitor, unsettled_first: bool
) -> None:
    """On timeout the wait answers (False, what settled by then) and unregisters its waiter."""
    publish(bus, sid(1), M.AVAILABLE)
    publish(bus, sid(2), M.LOADING)
    requests = [ServableRequest.specific("m", 1), ServableRequest.specific("m", 2)]
    if unsettled_first:
        requests.reverse()

    result = monitor.wait_until_servables_reach_state(requests, M.AVAILABLE, timeout_s=EXPIRING_S)

    assert result == (False, {sid(1): M.AVAILABLE})
    assert monitor._waiters == []  # nothing left to fire, or to leak, once the wait gave up


def test_waiter_in_another_thread_wakes_on_publish(
    bus: EventBus[ServableState], monitor: ServableStateMonitor
) -> None:
    """A wait blocked in another thread returns once the event is published from this thread."""
    results: list[tuple[bool, dict[ServableId, ManagerState]]] = []

    def wait() -> None:
        results.append(
            monitor.wait_until_servables_reach_state(
                [ServableRequest.specific("m", 1)], M.AVAILABLE, timeout_s=TIMEOUT_S
            )
        )

    waiter = threading.Thread(target=wait, name="state-waiter")
    waiter.start()
    publish(bus, sid(1), M.LOADING)
    publish(bus, sid(1), M.AVAILABLE)
    waiter.join(TIMEOUT_S)

    assert not waiter.is_alive()
    assert results == [(True, {sid(1): M.AVAILABLE})]
    assert monitor._waiters == []


def test_storage_conditions_are_kept_per_name_until_cleared(bus: EventBus[ServableState]) -> None:
    """The latest storage condition of each name answers; a clear one forgets the name."""
    storage: EventBus[StorageCondition] = EventBus()
    monitor = ServableStateMonitor(bus, storage=storage)
    missing = StorageCondition("m", UnavailableError("no base path"))
    storage.publish(missing)
    storage.publish(StorageCondition("n", holds_no_version=True))

    assert monitor.storage_condition("m") is missing
    assert monitor.storage_condition("n").holds_no_version
    assert monitor.storage_condition("other") == StorageCondition("other")
    storage.publish(StorageCondition("m"))
    assert monitor.storage_condition("m").clear
    monitor.close()
    storage.publish(missing)
    assert monitor.storage_condition("m").clear  # closed: no longer following


def test_changes_name_each_record_once_it_is_queryable(bus: EventBus[ServableState]) -> None:
    """A changes subscriber is told each state and condition recorded, and sees it recorded."""
    storage: EventBus[StorageCondition] = EventBus()
    monitor = ServableStateMonitor(bus, storage=storage)
    seen: list[tuple[str, ManagerState | None, bool]] = []

    def on_change(name: str) -> None:
        state = monitor.get_state(sid(1, name))
        seen.append(
            (name, state.manager_state if state else None, monitor.storage_condition(name).clear)
        )

    with monitor.changes.subscribe(on_change):
        publish(bus, sid(1), M.START)
        storage.publish(StorageCondition("n", holds_no_version=True))
    publish(bus, sid(1), M.LOADING)  # unsubscribed: not seen

    assert seen == [("m", M.START, True), ("n", None, False)]
