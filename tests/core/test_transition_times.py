"""TransitionTimes: a phase's length is answered once, by the event that ends it."""

from __future__ import annotations

from servinglib.core.servable_id import ServableId
from servinglib.core.servable_state import ManagerState, ServableState
from servinglib.core.transition_times import TransitionTimes
from servinglib.errors import UnknownError

M1 = ServableId("m", 1)


def event(state: ManagerState, servable: ServableId = M1, *, failed: bool = False) -> ServableState:
    return ServableState(servable, state, UnknownError("broken") if failed else None)


def test_loading_and_unloading_are_timed_by_the_event_that_ends_them() -> None:
    """LOADING → AVAILABLE and UNLOADING → END each give their length; other events None."""
    times = TransitionTimes()
    assert times.observe(event(ManagerState.START), 0.0) is None
    assert times.observe(event(ManagerState.LOADING), 1.0) is None
    assert times.observe(event(ManagerState.AVAILABLE), 3.5) == 2.5
    assert times.observe(event(ManagerState.UNLOADING), 10.0) is None
    assert times.observe(event(ManagerState.END), 10.25) == 0.25
    assert times.observe(event(ManagerState.END), 11.0) is None  # nothing began


def test_a_failed_load_is_timed_and_versions_are_apart() -> None:
    """A load ending in a failure (END) is timed too; each version keeps its own start."""
    times = TransitionTimes()
    other = ServableId("m", 2)
    times.observe(event(ManagerState.LOADING), 1.0)
    times.observe(event(ManagerState.LOADING, other), 2.0)
    assert times.observe(event(ManagerState.END, failed=True), 4.0) == 3.0
    assert times.observe(event(ManagerState.AVAILABLE, other), 2.5) == 0.5
