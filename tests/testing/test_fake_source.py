"""Tests for FakeSource: aspired versions set by hand, delivered as complete sets."""

from __future__ import annotations

from servinglib.core.aspired_versions_manager import AspiredVersionsManager
from servinglib.core.availability_preserving_policy import AvailabilityPreservingPolicy
from servinglib.core.loader import Loader
from servinglib.core.servable_data import ServableData
from servinglib.core.servable_id import ServableId
from servinglib.errors import NotFoundError
from servinglib.sources import StoragePath, connect
from servinglib.testing import FakeLoader, FakeSource, RecordingTarget, run_until


def test_a_mapping_emits_one_item_per_version_and_errors_as_error_items() -> None:
    """{version: data} becomes ServableData items; a ServingError value an error item."""
    source: FakeSource[StoragePath] = FakeSource()
    target: RecordingTarget[StoragePath] = RecordingTarget()
    connect(source, target)
    missing = NotFoundError("gone")

    source.set_aspired_versions("m", {1: "/m/1", 2: missing})

    assert target.last("m") == (
        ServableData.of(ServableId("m", 1), "/m/1"),
        ServableData.failed(ServableId("m", 2), missing),
    )


def test_items_are_emitted_as_given_even_malformed_ones() -> None:
    """A sequence of ServableData goes out untouched (to test a target's validation)."""
    source: FakeSource[StoragePath] = FakeSource()
    target: RecordingTarget[StoragePath] = RecordingTarget()
    connect(source, target)
    wrong = [
        ServableData.of(ServableId("other", 1), "/x"),
        ServableData.of(ServableId("m", 1), "/y"),
    ]

    source.set_aspired_versions("m", wrong)

    assert target.last("m") == tuple(wrong)


def test_sets_before_connect_are_held_and_the_latest_delivered() -> None:
    """As every Source, it holds what it emits until connected, the latest set per name."""
    source: FakeSource[StoragePath] = FakeSource()
    source.set_aspired_versions("m", {1: "/m/1"})
    source.set_aspired_versions("m", {2: "/m/2"})
    target: RecordingTarget[StoragePath] = RecordingTarget()

    connect(source, target)

    assert [call.version_numbers for call in target.calls()] == [(2,)]


def test_remove_version_re_emits_the_set_without_it() -> None:
    """remove_version emits the last set minus that version; current() follows."""
    source: FakeSource[StoragePath] = FakeSource()
    target: RecordingTarget[StoragePath] = RecordingTarget()
    connect(source, target)
    source.set_aspired_versions("m", {1: "/m/1", 2: "/m/2"})

    source.remove_version(ServableId("m", 2))

    assert [call.version_numbers for call in target.calls("m")] == [(1, 2), (1,)]
    assert source.current("m") == (ServableData.of(ServableId("m", 1), "/m/1"),)
    assert source.current("never") is None


def test_feeds_a_manager_that_loads_and_unloads_by_its_sets() -> None:
    """FakeSource[Loader] drives a real manager: a set loads, an empty set unloads."""
    source: FakeSource[Loader] = FakeSource()
    loader = FakeLoader("served")
    with AspiredVersionsManager(
        AvailabilityPreservingPolicy(), manage_state_interval_s=None
    ) as manager:
        connect(source, manager)

        source.set_aspired_versions("m", {1: loader})
        run_until(manager, lambda: manager.list_available_servable_ids() == [ServableId("m", 1)])
        source.set_aspired_versions("m", {})
        run_until(manager, lambda: loader.unload_calls == 1)

        assert manager.list_available_servable_ids() == []
