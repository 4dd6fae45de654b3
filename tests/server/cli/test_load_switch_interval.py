"""LoadSwitchInterval: a 1 ms GIL switch interval exactly while loads or unloads are in flight."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from servinglib.core.servable_id import ServableId
from servinglib.core.servable_state import ManagerState, ServableState
from servinglib.server.cli.load_switch_interval import LoadSwitchInterval

DEFAULT_S = 0.005


@pytest.fixture(autouse=True)
def default_interval() -> Iterator[None]:
    """Starts each test from Python's default interval and leaves it so."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(DEFAULT_S)
    yield
    sys.setswitchinterval(before)


def event(state: ManagerState, version: int = 1) -> ServableState:
    return ServableState(ServableId("m", version), state)


def test_a_load_shortens_the_interval_until_it_is_available() -> None:
    """LOADING sets 1 ms; AVAILABLE restores the interval that was in force."""
    switch = LoadSwitchInterval()
    switch.on_state(event(ManagerState.START))
    assert sys.getswitchinterval() == pytest.approx(DEFAULT_S)
    switch.on_state(event(ManagerState.LOADING))
    assert sys.getswitchinterval() == pytest.approx(0.001)
    switch.on_state(event(ManagerState.AVAILABLE))
    assert sys.getswitchinterval() == pytest.approx(DEFAULT_S)


def test_the_interval_is_restored_when_the_last_of_several_ends() -> None:
    """Overlapping loads and unloads keep 1 ms until none is in flight, a failed load included."""
    switch = LoadSwitchInterval()
    switch.on_state(event(ManagerState.LOADING, 2))
    switch.on_state(event(ManagerState.UNLOADING, 1))
    switch.on_state(event(ManagerState.END, 1))  # unloaded
    assert sys.getswitchinterval() == pytest.approx(0.001)
    switch.on_state(event(ManagerState.END, 2))  # its load failed
    assert sys.getswitchinterval() == pytest.approx(DEFAULT_S)
