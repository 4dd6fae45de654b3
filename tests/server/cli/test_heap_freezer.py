"""HeapFreezer: live objects frozen out of full collections; refrozen when versions change."""

from __future__ import annotations

import gc
import sys
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

from servinglib.core.servable_id import ServableId
from servinglib.core.servable_state import ManagerState, ServableState
from servinglib.server.cli import heap_freezer
from servinglib.server.cli.flags import parse_flags
from servinglib.server.cli.heap_freezer import HeapAction, HeapFreezer
from servinglib.server.cli.model_server import ModelServer
from servinglib.testing import write_python_model


@pytest.fixture(autouse=True)
def unfrozen() -> Iterator[None]:
    """Leaves the process's heap unfrozen, as the other tests expect it."""
    yield
    gc.unfreeze()


def event(state: ManagerState, version: int = 1) -> ServableState:
    return ServableState(ServableId("m", version), state)


class Node:
    other: Node


def make_cycle() -> weakref.ref[Node]:
    """A garbage reference cycle (as an unloaded model leaves), alive until collected."""
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_freeze_freezes_what_is_alive() -> None:
    """After freeze() the live objects are in the permanent generation."""
    HeapFreezer().freeze()
    assert gc.get_freeze_count() > 0


def test_nothing_happens_without_a_settled_version() -> None:
    """Loading states alone change nothing: the check leaves the heap as it is."""
    freezer = HeapFreezer(max_unfrozen_objects=0)
    freezer.on_state(event(ManagerState.LOADING))
    assert freezer.refreeze_if_changed() is HeapAction.NONE


def test_a_small_unfrozen_heap_is_left_unfrozen() -> None:
    """A change with few unfrozen objects freezes nothing, so its cycles stay collectable."""
    freezer = HeapFreezer()
    freezer.freeze()
    frozen = gc.get_freeze_count()
    freezer.on_state(event(ManagerState.LOADING))
    cycle = make_cycle()  # the loaded version's objects
    freezer.on_state(event(ManagerState.AVAILABLE))
    assert freezer.refreeze_if_changed() is HeapAction.NONE
    # Nothing more was frozen; fewer may be, as frozen objects of other threads (a test
    # runner's) die meanwhile.
    assert gc.get_freeze_count() <= frozen
    freezer.on_state(event(ManagerState.END))
    assert freezer.refreeze_if_changed() is HeapAction.NONE  # it was never frozen
    gc.collect()
    assert cycle() is None


def test_a_large_unfrozen_heap_is_frozen_without_unfreezing() -> None:
    """Past the bound, the new objects are frozen; what was frozen before is not walked again."""
    freezer = HeapFreezer(max_unfrozen_objects=0)
    frozen_garbage = make_cycle()
    gc.freeze()  # the base, holding a cycle that is garbage already
    freezer.on_state(event(ManagerState.AVAILABLE))
    assert freezer.refreeze_if_changed() is HeapAction.FREEZE_NEW
    assert frozen_garbage() is not None  # no unfreeze: a whole-heap collection was not paid
    assert freezer.refreeze_if_changed() is HeapAction.NONE  # once per change


def test_the_end_of_a_frozen_version_refreezes_once() -> None:
    """A version frozen while live that ends makes the next check collect the whole heap, once."""
    freezer = HeapFreezer(max_unfrozen_objects=0)
    freezer.on_state(event(ManagerState.LOADING, 1))
    cycle = make_cycle()
    freezer.on_state(event(ManagerState.AVAILABLE, 1))
    del cycle
    assert freezer.refreeze_if_changed() is HeapAction.FREEZE_NEW  # version 1 is frozen now
    cycle = make_cycle()
    gc.freeze()  # as the freeze of version 1 would have caught it
    freezer.on_state(event(ManagerState.END, 1))
    assert freezer.refreeze_if_changed() is HeapAction.REFREEZE
    assert cycle() is None
    assert freezer.refreeze_if_changed() is HeapAction.NONE


def test_cycles_of_frozen_objects_are_collected_by_a_refreeze() -> None:
    """Garbage cycles that were frozen (an unloaded model's) are freed by refreeze()."""
    cycle = make_cycle()
    gc.freeze()  # the cycle is garbage, but frozen: plain collections keep it
    gc.collect()
    assert cycle() is not None
    HeapFreezer().refreeze()
    assert cycle() is None


MODEL_PY = """
from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec

class Model(PythonModel):
    @signature(name="serving_default", inputs=[TensorSpec("x", "float32", [-1])],
               outputs=[TensorSpec("y", "float32", [-1])])
    def predict(self, x):
        return {"y": x}
"""


def test_the_server_freezes_before_its_models_load(tmp_path: Path) -> None:
    """ModelServer freezes the heap before loading, so a model's objects stay collectable."""
    write_python_model(tmp_path, "m", MODEL_PY)
    before = Node()
    flags = parse_flags(
        [
            f"--model_base_path={tmp_path / 'm'}",
            "--model_name=m",
            "--model_platform=python",
            "--allow_python_code_execution",
            "--port=0",
            "--rest_api_port=0",
        ]
    )
    earlier = set(sys.modules)  # other tests' model modules may still be there (and frozen)
    server = ModelServer(flags)
    try:
        modules = [
            m
            for n, m in sys.modules.items()
            if n.startswith("servinglib_python_model_") and n not in earlier
        ]
        unfrozen = {id(o) for o in gc.get_objects()}
        assert id(before) not in unfrozen
        assert modules
        assert all(id(m) in unfrozen for m in modules)
    finally:
        server.plane.close()
        server.core.close()


def test_objects_are_counted_only_once_the_heap_has_grown(monkeypatch: pytest.MonkeyPatch) -> None:
    """A version change with little new memory skips the O(heap) count of unfrozen objects."""
    counted: list[int] = []
    get_objects = gc.get_objects

    def counting() -> list[object]:
        found = get_objects()
        counted.append(len(found))
        return found

    monkeypatch.setattr(heap_freezer.gc, "get_objects", counting)
    freezer = HeapFreezer(max_unfrozen_objects=1_000_000)
    freezer.freeze()
    freezer.on_state(event(ManagerState.AVAILABLE, 1))
    assert freezer.refreeze_if_changed() is HeapAction.NONE
    assert counted == []  # grew by far less than half the bound: not worth counting
    grown = [object() for _ in range(600_000)]  # 600,000 more memory blocks
    freezer.on_state(event(ManagerState.AVAILABLE, 2))
    assert freezer.refreeze_if_changed() is HeapAction.NONE  # (object()s are not tracked)
    assert len(counted) == 1
    del grown
