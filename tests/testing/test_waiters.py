"""Tests for servinglib.testing's waiters: wait_until, wait_for_state and run_until."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from servinglib.core.aspired_versions_manager import AspiredVersionsManager
from servinglib.core.availability_preserving_policy import AvailabilityPreservingPolicy
from servinglib.core.basic_manager import BasicManager, ManagerOptions
from servinglib.core.loader import Loader
from servinglib.core.loader_harness import LoadRetryOptions
from servinglib.core.servable_data import ServableData
from servinglib.core.servable_id import ServableId
from servinglib.core.servable_request import ServableRequest
from servinglib.core.servable_state import ManagerState
from servinglib.core.servable_state_monitor import ServableStateMonitor
from servinglib.errors import InvalidArgumentError, UnavailableError
from servinglib.testing import FakeLoader, run_until, wait_for_state, wait_until

TIMEOUT_S = 10.0
# A wait that is meant to time out: short, since the test expects it to expire.
EXPIRING_S = 0.05
NO_RETRIES = LoadRetryOptions(max_num_load_retries=0)
V1 = ServableId("m", 1)


def join(thread: threading.Thread) -> None:
    thread.join(TIMEOUT_S)
    assert not thread.is_alive(), f"{thread.name} did not finish within {TIMEOUT_S} s"


@pytest.fixture
def basic_manager() -> Iterator[BasicManager]:
    manager = BasicManager(ManagerOptions(num_load_threads=1, load_retry=NO_RETRIES))
    yield manager
    manager.close()


@pytest.fixture
def monitor(basic_manager: BasicManager) -> Iterator[ServableStateMonitor]:
    monitor = ServableStateMonitor(basic_manager.event_bus)
    yield monitor
    monitor.close()


def aspired(manager: AspiredVersionsManager, *loaders: tuple[int, Loader]) -> None:
    """Makes the given (version, loader) pairs the aspired versions of servable "m"."""
    manager.set_aspired_versions(
        "m", [ServableData.of(ServableId("m", version), loader) for version, loader in loaders]
    )


# -- wait_until ----------------------------------------------------------------


def test_wait_until_returns_at_once_when_already_true() -> None:
    """wait_until returns without waiting when the predicate already holds."""
    wait_until(lambda: True, timeout_s=0.0)


def test_wait_until_returns_when_another_thread_makes_it_true() -> None:
    """wait_until keeps checking and returns once another thread flips the condition."""
    polled = threading.Event()
    flag = threading.Event()

    def predicate() -> bool:
        polled.set()
        return flag.is_set()

    def flip_after_first_poll() -> None:
        assert polled.wait(TIMEOUT_S)
        flag.set()

    flipper = threading.Thread(target=flip_after_first_poll, daemon=True)
    flipper.start()

    wait_until(predicate, timeout_s=TIMEOUT_S)

    assert flag.is_set()
    join(flipper)


def test_wait_until_times_out_with_the_message() -> None:
    """A predicate that never holds makes wait_until raise TimeoutError with the given message."""
    with pytest.raises(TimeoutError, match=r"^the model never loaded$"):
        wait_until(lambda: False, timeout_s=EXPIRING_S, message="the model never loaded")


def test_wait_until_default_message_names_the_timeout() -> None:
    """Without a message, the TimeoutError says how long it waited."""
    with pytest.raises(TimeoutError, match=f"within {EXPIRING_S} s"):
        wait_until(lambda: False, timeout_s=EXPIRING_S)


# -- wait_for_state --------------------------------------------------------------


def test_wait_for_state_returns_once_basic_manager_makes_it_available(
    basic_manager: BasicManager, monitor: ServableStateMonitor
) -> None:
    """wait_for_state returns once a load on the manager's pool publishes AVAILABLE."""
    gate = threading.Event()
    loader = FakeLoader("served", load_gate=gate)
    basic_manager.manage_servable(ServableData.of(V1, loader))
    future = basic_manager.load_servable(V1)
    assert loader.load_started.wait(TIMEOUT_S)

    gate.set()
    wait_for_state(monitor, V1, ManagerState.AVAILABLE, timeout_s=TIMEOUT_S)

    with basic_manager.servable_handle(ServableRequest.from_id(V1)) as handle:
        assert handle.servable == "served"
    future.result(TIMEOUT_S)


def test_wait_for_state_returns_when_state_already_reached(
    basic_manager: BasicManager, monitor: ServableStateMonitor
) -> None:
    """wait_for_state returns at once for a state the servable is already in."""
    basic_manager.manage_servable(ServableData.of(V1, FakeLoader()))
    basic_manager.load_servable(V1).result(TIMEOUT_S)

    wait_for_state(monitor, V1, ManagerState.AVAILABLE, timeout_s=0.0)


def test_wait_for_state_raises_assertion_error_when_servable_ends_in_error(
    basic_manager: BasicManager, monitor: ServableStateMonitor
) -> None:
    """A servable whose load fails ends in END with its error: AssertionError naming the error."""
    loader = FakeLoader(load_error=InvalidArgumentError("corrupt saved model"))
    basic_manager.manage_servable(ServableData.of(V1, loader))
    basic_manager.load_servable(V1)

    with pytest.raises(AssertionError, match=r"ended in END.*corrupt saved model"):
        wait_for_state(monitor, V1, ManagerState.AVAILABLE, timeout_s=TIMEOUT_S)


def test_wait_for_state_raises_assertion_error_when_servable_was_unloaded(
    basic_manager: BasicManager, monitor: ServableStateMonitor
) -> None:
    """Waiting for AVAILABLE on a version already unloaded (END) fails instead of hanging."""
    basic_manager.manage_servable(ServableData.of(V1, FakeLoader()))
    basic_manager.load_servable(V1).result(TIMEOUT_S)
    basic_manager.unload_servable(V1).result(TIMEOUT_S)

    with pytest.raises(AssertionError, match="ended in END"):
        wait_for_state(monitor, V1, ManagerState.AVAILABLE, timeout_s=TIMEOUT_S)


def test_wait_for_state_times_out_while_still_loading(
    basic_manager: BasicManager, monitor: ServableStateMonitor
) -> None:
    """A load that has not finished within the timeout raises TimeoutError naming the goal."""
    gate = threading.Event()
    loader = FakeLoader(load_gate=gate)
    basic_manager.manage_servable(ServableData.of(V1, loader))
    future = basic_manager.load_servable(V1)
    assert loader.load_started.wait(TIMEOUT_S)

    with pytest.raises(TimeoutError, match=r"did not reach AVAILABLE within"):
        wait_for_state(monitor, V1, ManagerState.AVAILABLE, timeout_s=EXPIRING_S)

    gate.set()
    future.result(TIMEOUT_S)


def test_wait_for_state_times_out_for_unknown_servable(monitor: ServableStateMonitor) -> None:
    """A servable never published raises TimeoutError, not AssertionError."""
    with pytest.raises(TimeoutError):
        wait_for_state(monitor, ServableId("unknown", 1), ManagerState.AVAILABLE, EXPIRING_S)


def test_wait_for_state_with_aspired_versions_manager_thread() -> None:
    """wait_for_state follows a version made available by the manager's own manage-state thread."""
    with AspiredVersionsManager(
        AvailabilityPreservingPolicy(), ManagerOptions(num_load_threads=2)
    ) as manager:
        monitor = ServableStateMonitor(manager.event_bus)
        try:
            aspired(manager, (1, FakeLoader("v1")))

            wait_for_state(monitor, V1, ManagerState.AVAILABLE, timeout_s=TIMEOUT_S)

            assert manager.list_available_servable_ids() == [V1]
        finally:
            monitor.close()


# -- run_until -------------------------------------------------------------------


@pytest.mark.parametrize("num_load_threads", [0, 2])
def test_run_until_steps_manager_until_version_available(num_load_threads: int) -> None:
    """run_until steps a hand-driven manager until an aspired version serves, pool or not."""
    options = ManagerOptions(num_load_threads=num_load_threads, load_retry=NO_RETRIES)
    with AspiredVersionsManager(
        AvailabilityPreservingPolicy(), options, manage_state_interval_s=None
    ) as manager:
        aspired(manager, (1, FakeLoader("v1")))
        assert manager.list_available_servable_ids() == []

        run_until(manager, lambda: V1 in manager.list_available_servable_ids())

        with manager.servable_handle(ServableRequest.latest("m")) as handle:
            assert handle.servable == "v1"


def test_run_until_steps_through_a_swap() -> None:
    """run_until drives a full swap from version 1 to version 2, one step at a time."""
    v2 = ServableId("m", 2)
    with AspiredVersionsManager(
        AvailabilityPreservingPolicy(), ManagerOptions(), manage_state_interval_s=None
    ) as manager:
        aspired(manager, (1, FakeLoader("v1")))
        run_until(manager, lambda: manager.list_available_servable_ids() == [V1])

        aspired(manager, (2, FakeLoader("v2")))
        run_until(manager, lambda: manager.list_available_servable_ids() == [v2])


def test_run_until_does_not_step_when_already_true() -> None:
    """run_until returns without a step when the predicate already holds."""
    with AspiredVersionsManager(
        AvailabilityPreservingPolicy(), ManagerOptions(), manage_state_interval_s=None
    ) as manager:
        aspired(manager, (1, FakeLoader("v1")))

        run_until(manager, lambda: True)

        # Not even the aspired-versions request was applied: no step ran.
        assert manager.aspired_snapshots("m") == []


def test_run_until_times_out_when_version_never_loads() -> None:
    """A version whose load keeps failing makes run_until raise TimeoutError at the deadline."""
    loader = FakeLoader(load_error=UnavailableError("backend down"))
    options = ManagerOptions(load_retry=NO_RETRIES)
    with AspiredVersionsManager(
        AvailabilityPreservingPolicy(), options, manage_state_interval_s=None
    ) as manager:
        aspired(manager, (1, loader))

        with pytest.raises(TimeoutError, match="condition not met"):
            run_until(
                manager, lambda: V1 in manager.list_available_servable_ids(), timeout_s=EXPIRING_S
            )

        assert loader.load_calls == 1


def test_run_until_gives_up_after_max_steps() -> None:
    """run_until raises TimeoutError once max_steps steps changed something without success."""
    with AspiredVersionsManager(
        AvailabilityPreservingPolicy(), ManagerOptions(), manage_state_interval_s=None
    ) as manager:
        aspired(manager, *((version, FakeLoader()) for version in range(1, 6)))
        with pytest.raises(TimeoutError, match="3 steps"):
            run_until(manager, lambda: False, max_steps=3, timeout_s=TIMEOUT_S)
        assert len(manager.list_available_servable_ids()) < 5
