"""Tests for FakeStoragePathSourceAdapter: version directories become FakeLoaders."""

from __future__ import annotations

from servinglib.core.loader import Loader
from servinglib.core.servable_id import ServableId
from servinglib.errors import InvalidArgumentError, NotFoundError, ServingError
from servinglib.sources import StoragePath, connect
from servinglib.testing import FakeLoader, FakeSource, FakeStoragePathSourceAdapter, RecordingTarget

V1 = ServableId("m", 1)
V2 = ServableId("m", 2)


def pipeline(
    adapter: FakeStoragePathSourceAdapter,
) -> tuple[FakeSource[StoragePath], RecordingTarget[Loader]]:
    source: FakeSource[StoragePath] = FakeSource()
    target: RecordingTarget[Loader] = RecordingTarget()
    connect(source, adapter)
    connect(adapter, target)
    return source, target


def test_each_path_becomes_a_fake_loader_serving_the_path() -> None:
    """By default a version directory becomes FakeLoader(path), which serves the path."""
    adapter = FakeStoragePathSourceAdapter()
    source, target = pipeline(adapter)

    source.set_aspired_versions("m", {1: "/models/m/1"})

    (item,) = target.last("m") or ()
    assert item.id == V1
    assert isinstance(item.data, FakeLoader)
    item.data.load()
    assert item.data.servable() == "/models/m/1"
    assert adapter.loaders == {V1: item.data}


def test_a_given_factory_makes_the_loaders_and_its_errors_become_items() -> None:
    """loader_factory(path) is used; what it raises becomes that version's error."""

    def factory(path: StoragePath) -> Loader:
        if path.endswith("2"):
            raise InvalidArgumentError(f"{path} is not a model")
        return FakeLoader(path.upper())

    adapter = FakeStoragePathSourceAdapter(factory)
    source, target = pipeline(adapter)

    source.set_aspired_versions("m", {1: "/m/1", 2: "/m/2"})

    first, second = target.last("m") or ()
    assert first.ok
    assert isinstance(second.error, InvalidArgumentError)
    assert "/m/2 is not a model" in str(second.error)
    assert list(adapter.loaders) == [V1]


def test_error_items_pass_through() -> None:
    """An item arriving as an error stays that error; no loader is made for it."""
    adapter = FakeStoragePathSourceAdapter()
    source, target = pipeline(adapter)
    missing: ServingError = NotFoundError("no such directory")

    source.set_aspired_versions("m", {2: missing})

    (item,) = target.last("m") or ()
    assert item.error is missing
    assert adapter.loaders == {}
