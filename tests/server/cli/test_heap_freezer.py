"""HeapFreezer: live objects frozen out of full collections; refrozen when versions change."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from servinglib.core.servable_id import ServableId
from servinglib.core.servable_state import ManagerState, ServableState
from servinglib.server.cli.heap_freezer import HeapFreezer


@pytest.fixture(autouse=True)
def unfrozen() -> Iterator[None]:
    """Leaves the process's heap unfrozen, as the other tests expect it."""
    yield
    gc.unfreeze()


def event(state: ManagerState) -> ServableState:
    return ServableState(ServableId("m", 1), state)


def test_refreeze_freezes_what_is_alive() -> None:
    """After refreeze() the live objects are in the permanent generation."""
    HeapFreezer().refreeze()
    assert gc.get_freeze_count() > 0


def test_refreezes_only_after_a_version_settles() -> None:
    """Loading states change nothing; AVAILABLE or END make the next check refreeze, once."""
    freezer = HeapFreezer()
    freezer.on_state(event(ManagerState.LOADING))
    assert not freezer.refreeze_if_changed()
    freezer.on_state(event(ManagerState.AVAILABLE))
    assert freezer.refreeze_if_changed()
    assert not freezer.refreeze_if_changed()
    freezer.on_state(event(ManagerState.END))
    assert freezer.refreeze_if_changed()


def test_cycles_of_frozen_objects_are_collected_by_a_refreeze() -> None:
    """Garbage cycles that were frozen (an unloaded model's) are freed by the next refreeze."""

    class Node:
        other: Node

    def make_cycle() -> weakref.ref[Node]:
        a, b = Node(), Node()
        a.other, b.other = b, a
        return weakref.ref(a)

    cycle = make_cycle()
    gc.freeze()  # the cycle is garbage, but frozen: plain collections keep it
    gc.collect()
    assert cycle() is not None
    HeapFreezer().refreeze()
    assert cycle() is None
