"""Tests for servinglib.server.reload_wait: a reload's wait, woken by the monitor's changes."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from servinglib.core.event_bus import EventBus
from servinglib.core.servable_id import ServableId
from servinglib.core.servable_state import ManagerState, ServableState
from servinglib.core.servable_state_monitor import ServableStateMonitor
from servinglib.core.storage_condition import StorageCondition
from servinglib.errors import (
    DeadlineExceededError,
    InvalidArgumentError,
    NotFoundError,
    ServingError,
    StatusCode,
    UnavailableError,
)
from servinglib.server.reload_wait import ReloadWaits, failure_error

TIMEOUT_S = 10.0


class Rig:
    """A monitor following a state bus and a storage bus the test publishes on by hand."""

    def __init__(self) -> None:
        self.states: EventBus[ServableState] = EventBus()
        self.storage: EventBus[StorageCondition] = EventBus()
        self.monitor = ServableStateMonitor(self.states, storage=self.storage)
        self.waits = ReloadWaits(self.monitor)

    def publish(
        self, name: str, version: int, state: ManagerState, error: ServingError | None = None
    ) -> None:
        self.states.publish(ServableState(ServableId(name, version), state, error))


@pytest.fixture
def rig() -> Iterator[Rig]:
    made = Rig()
    yield made
    made.monitor.close()


def test_a_wait_ends_when_each_model_is_available_or_failed(rig: Rig) -> None:
    """Events published on other threads end the wait: one model available, one failed."""
    broken = InvalidArgumentError("bad model")
    done = threading.Event()
    result: list[dict[str, ServingError]] = []

    def wait() -> None:
        result.append(
            rig.waits.wait({"a": {}, "b": {}}, timeout_s=TIMEOUT_S, abandoned=lambda _n: None)
        )
        done.set()

    thread = threading.Thread(target=wait)
    thread.start()
    rig.publish("a", 1, ManagerState.AVAILABLE)
    rig.publish("b", 1, ManagerState.END, broken)
    assert done.wait(TIMEOUT_S)
    thread.join()
    assert result == [{"b": broken}]


def test_a_storage_error_fails_a_model_the_reload_published_nothing_of(rig: Rig) -> None:
    """A base path that cannot be read fails its model at once, with the source's error."""
    missing = NotFoundError("no base path")
    rig.storage.publish(StorageCondition("m", missing))
    assert rig.waits.wait({"m": {}}, timeout_s=TIMEOUT_S, abandoned=lambda _n: None) == {
        "m": missing
    }


def test_wake_all_has_each_wait_ask_whether_it_was_abandoned(rig: Rig) -> None:
    """After wake_all a pending model is asked again, and abandoned says why it ends."""
    asked = threading.Event()  # the wait listens, and asked once: nothing to end it yet
    stopped = threading.Event()
    why = UnavailableError("stopped")
    result: list[dict[str, ServingError]] = []

    def abandoned(_name: str) -> ServingError | None:
        asked.set()
        return why if stopped.is_set() else None

    thread = threading.Thread(
        target=lambda: result.append(rig.waits.wait({"m": {}}, timeout_s=None, abandoned=abandoned))
    )
    thread.start()
    assert asked.wait(TIMEOUT_S)
    stopped.set()
    rig.waits.wake_all()
    thread.join(TIMEOUT_S)
    assert result == [{"m": why}]


def test_a_model_still_pending_at_the_deadline_fails_with_deadline_exceeded(rig: Rig) -> None:
    """Past timeout_s a model still loading fails DEADLINE_EXCEEDED, naming the timeout."""
    rig.publish("m", 1, ManagerState.LOADING)
    failures = rig.waits.wait({"m": {}}, timeout_s=0.05, abandoned=lambda _n: None)
    assert isinstance(failures["m"], DeadlineExceededError)
    assert "within 0.05 s" in failures["m"].message


def test_the_error_of_a_reload_is_its_failures_code_when_they_share_one() -> None:
    """failure_error names every model; one code keeps its class, mixed codes are UNKNOWN."""
    same = failure_error({"a": NotFoundError("x"), "b": NotFoundError("y")})
    mixed = failure_error({"a": NotFoundError("x"), "b": UnavailableError("y")})
    assert isinstance(same, NotFoundError)
    assert same.message == "2 model(s) did not become available: a: x; b: y"
    assert mixed.code is StatusCode.UNKNOWN
