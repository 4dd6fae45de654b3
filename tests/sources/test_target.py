"""Tests for servinglib.sources.target: TargetBase callbacks, detach, and connect() end to end."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from servinglib.core.aspired_versions_manager import AspiredVersionsManager
from servinglib.core.availability_preserving_policy import AvailabilityPreservingPolicy
from servinglib.core.loader import Loader
from servinglib.core.servable_data import ServableData
from servinglib.core.servable_id import ServableId
from servinglib.core.servable_request import ServableRequest
from servinglib.sources.source import Source, StoragePath
from servinglib.sources.source_adapter import UnarySourceAdapter
from servinglib.sources.static_storage_path_source import StaticStoragePathSource
from servinglib.sources.target import connect
from servinglib.testing import FakeLoader, RecordingTarget, run_until

V1 = ServableId("m", 1)
PATH_1 = "/models/m/1"


class PathToFakeLoader(UnarySourceAdapter[StoragePath, Loader]):
    """Turns each version directory into a FakeLoader serving the path."""

    def convert(self, servable_name: str, data: StoragePath) -> Loader:
        return FakeLoader(data)


@pytest.fixture
def manager() -> Iterator[AspiredVersionsManager]:
    manager = AspiredVersionsManager(AvailabilityPreservingPolicy(), manage_state_interval_s=None)
    yield manager
    manager.close()


def test_callback_forwards_to_set_aspired_versions() -> None:
    """A callback from TargetBase hands each call to set_aspired_versions unchanged."""
    target: RecordingTarget[StoragePath] = RecordingTarget()
    callback = target.aspired_versions_callback()
    callback("m", [ServableData.of(V1, PATH_1)])
    callback("m", [])
    assert [(c.name, c.versions) for c in target.calls()] == [
        ("m", (ServableData.of(V1, PATH_1),)),
        ("m", ()),
    ]


def test_callback_stays_callable_and_is_a_no_op_after_detach() -> None:
    """After detach(), callbacks handed out before and after do nothing and do not raise."""
    target: RecordingTarget[StoragePath] = RecordingTarget()
    before = target.aspired_versions_callback()
    before("m", [ServableData.of(V1, PATH_1)])
    target.detach()
    after = target.aspired_versions_callback()
    before("m", [])
    after("m", [])
    assert [(c.name, c.versions) for c in target.calls()] == [("m", (ServableData.of(V1, PATH_1),))]


def test_connect_delivers_the_source_emissions_to_the_target() -> None:
    """connect(source, target) routes held and later emissions into set_aspired_versions."""
    source: Source[StoragePath] = Source()
    target: RecordingTarget[StoragePath] = RecordingTarget()
    source.emit_aspired_versions("m", [ServableData.of(V1, PATH_1)])
    connect(source, target)
    source.emit_aspired_versions("m", [])
    assert [(c.name, c.versions) for c in target.calls()] == [
        ("m", (ServableData.of(V1, PATH_1),)),
        ("m", ()),
    ]


def test_manager_callback_is_a_no_op_after_close() -> None:
    """AspiredVersionsManager's callback does nothing once the manager is closed."""
    manager = AspiredVersionsManager(AvailabilityPreservingPolicy(), manage_state_interval_s=None)
    callback = manager.aspired_versions_callback()
    manager.close()
    callback("m", [ServableData.of(V1, FakeLoader())])
    # Had the request been queued, this step would try to manage it on a closed manager.
    assert manager.run_once() is False
    assert manager.basic_manager.managed_servable_names() == []


def test_manager_callback_queues_the_request_while_open(manager: AspiredVersionsManager) -> None:
    """Before close, the manager's callback is set_aspired_versions: a step starts managing it."""
    manager.aspired_versions_callback()("m", [ServableData.of(V1, FakeLoader())])
    assert manager.run_once() is True
    assert manager.basic_manager.managed_servable_names() == ["m"]


def test_static_source_through_adapter_to_manager_ends_available(
    manager: AspiredVersionsManager,
) -> None:
    """StaticStoragePathSource → path-to-loader adapter → manager serves the version's loader.

    The source is connected first, so its version is held by the adapter's
    output until the adapter is connected to the manager.
    """
    source = StaticStoragePathSource("m", 1, PATH_1)
    adapter = PathToFakeLoader()
    connect(source, adapter)
    connect(adapter, manager)
    run_until(manager, lambda: manager.list_available_servable_ids() == [V1])
    with manager.servable_handle(ServableRequest.latest("m")) as handle:
        assert handle.servable == PATH_1
