"""Tests for servinglib.core.simple_loader: a Loader from a creator function and an estimate."""

from __future__ import annotations

import pytest

from servinglib.core.basic_manager import BasicManager
from servinglib.core.loader import Loader
from servinglib.core.resources import ResourceAllocation
from servinglib.core.servable_data import ServableData
from servinglib.core.servable_id import ServableId
from servinglib.core.servable_request import ServableRequest
from servinglib.core.simple_loader import SimpleLoader
from servinglib.errors import FailedPreconditionError, UnavailableError

TIMEOUT_S = 10.0


class Model:
    """A stand-in servable that records whether it was closed."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.closed = False

    def close(self) -> None:
        self.closed = True


class CountingCreator:
    """A creator that makes a new Model per call and counts the calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> Model:
        self.calls += 1
        return Model(f"model-{self.calls}")


def test_is_a_loader() -> None:
    """SimpleLoader implements the Loader interface."""
    assert isinstance(SimpleLoader(lambda: 1), Loader)


def test_creator_runs_only_on_load() -> None:
    """The creator is not called at construction, and once per load()."""
    creator = CountingCreator()
    loader = SimpleLoader(creator)
    assert creator.calls == 0

    loader.load()

    assert creator.calls == 1


def test_servable_is_what_the_creator_made() -> None:
    """Between load and unload, servable() returns the creator's result, every time the same."""
    creator = CountingCreator()
    loader = SimpleLoader(creator)
    loader.load()

    model = loader.servable()

    assert model.name == "model-1"
    assert loader.servable() is model


def test_servable_before_load_raises() -> None:
    """servable() before load raises FailedPreconditionError."""
    loader = SimpleLoader(CountingCreator())

    with pytest.raises(FailedPreconditionError, match="not loaded"):
        loader.servable()


def test_servable_after_unload_raises() -> None:
    """servable() after unload raises FailedPreconditionError: the servable was dropped."""
    loader = SimpleLoader(CountingCreator())
    loader.load()
    loader.unload()

    with pytest.raises(FailedPreconditionError):
        loader.servable()


def test_failed_creator_propagates_and_leaves_loader_unloaded() -> None:
    """A creator's exception comes out of load(), and the loader holds nothing afterwards."""

    def failing() -> Model:
        raise UnavailableError("weights missing")

    loader = SimpleLoader(failing)

    with pytest.raises(UnavailableError, match="weights missing"):
        loader.load()
    with pytest.raises(FailedPreconditionError):
        loader.servable()


def test_load_after_unload_creates_a_new_servable() -> None:
    """Loading again after unload calls the creator again and serves the new object."""
    loader = SimpleLoader(CountingCreator())
    loader.load()
    first = loader.servable()
    loader.unload()

    loader.load()

    assert loader.servable() is not first
    assert loader.servable().name == "model-2"


def test_on_unload_is_called_with_the_servable_once() -> None:
    """unload() passes the loaded servable to on_unload exactly once, and not before."""
    released: list[Model] = []
    loader = SimpleLoader(CountingCreator(), on_unload=released.append)
    loader.load()
    model = loader.servable()
    assert released == []

    loader.unload()

    assert released == [model]


def test_on_unload_can_release_the_servable() -> None:
    """on_unload may release what the servable holds, e.g. close it."""
    loader = SimpleLoader(CountingCreator(), on_unload=Model.close)
    loader.load()
    model = loader.servable()

    loader.unload()

    assert model.closed


def test_estimate_defaults_to_empty() -> None:
    """Without an estimate, estimate_resources() is the empty allocation."""
    assert SimpleLoader(CountingCreator()).estimate_resources() == ResourceAllocation.empty()


def test_estimate_as_value() -> None:
    """An allocation given as the estimate is returned as is, before and after load."""
    estimate = ResourceAllocation.ram_bytes(4096)
    loader = SimpleLoader(CountingCreator(), estimate)

    assert loader.estimate_resources() == estimate
    loader.load()
    assert loader.estimate_resources() == estimate


def test_estimate_as_callable_is_called_on_every_estimate() -> None:
    """A callable estimate is called anew on each estimate_resources(), without loading."""
    calls: list[int] = []

    def estimate() -> ResourceAllocation:
        calls.append(1)
        return ResourceAllocation.ram_bytes(100 - len(calls))

    creator = CountingCreator()
    loader = SimpleLoader(creator, estimate)

    assert loader.estimate_resources() == ResourceAllocation.ram_bytes(99)
    assert loader.estimate_resources() == ResourceAllocation.ram_bytes(98)
    assert len(calls) == 2
    assert creator.calls == 0


def test_served_and_released_through_a_manager() -> None:
    """A BasicManager serves a SimpleLoader's servable and its unload calls on_unload."""
    released: list[Model] = []
    servable_id = ServableId("m", 1)
    loader = SimpleLoader(CountingCreator(), on_unload=released.append)
    with BasicManager() as manager:
        manager.manage_servable(ServableData.of(servable_id, loader))
        manager.load_servable(servable_id).result(TIMEOUT_S)

        with manager.servable_handle(ServableRequest.latest("m")) as handle:
            served = handle.servable
        assert served.name == "model-1"

        manager.unload_servable(servable_id).result(TIMEOUT_S)
        assert released == [served]
