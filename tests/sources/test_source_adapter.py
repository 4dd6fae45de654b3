"""Tests for servinglib.sources.source_adapter: per-item conversion, errors as data, injection."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeVar

import pytest

from servinglib.core.aspired_versions_manager import AspiredVersionsManager
from servinglib.core.availability_preserving_policy import AvailabilityPreservingPolicy
from servinglib.core.event_bus import EventBus
from servinglib.core.loader import Loader
from servinglib.core.servable_data import ServableData
from servinglib.core.servable_id import ServableId
from servinglib.core.servable_state import ManagerState, ServableState
from servinglib.core.servable_state_monitor import ServableStateMonitor
from servinglib.errors import (
    DataLossError,
    NotFoundError,
    ServingError,
    StatusCode,
    UnimplementedError,
)
from servinglib.sources.source import Source, StoragePath
from servinglib.sources.source_adapter import ErrorInjectingSourceAdapter, UnarySourceAdapter
from servinglib.sources.target import connect
from servinglib.testing import RecordingTarget

T = TypeVar("T")

V1 = ServableId("m", 1)
V2 = ServableId("m", 2)
V3 = ServableId("m", 3)
MISSING = NotFoundError("no saved_model.pb in /models/m/missing")


class Describe(UnarySourceAdapter[StoragePath, str]):
    """Converts a path to "loader for <path>"; "missing" raises MISSING, "broken" a ValueError."""

    def __init__(self) -> None:
        super().__init__()
        self.converted: list[StoragePath] = []

    def convert(self, servable_name: str, data: StoragePath) -> str:
        self.converted.append(data)
        if data.endswith("missing"):
            raise MISSING
        if data.endswith("broken"):
            raise ValueError("cannot parse saved_model.pb")
        return f"loader for {data}"


@pytest.fixture
def adapter() -> Describe:
    return Describe()


@pytest.fixture
def target(adapter: Describe) -> RecordingTarget[str]:
    target: RecordingTarget[str] = RecordingTarget()
    connect(adapter, target)
    return target


def only_call(target: RecordingTarget[T]) -> tuple[ServableData[T], ...]:
    """The versions of the single call ``target`` received, which must be for "m"."""
    [call] = target.calls()
    assert call.name == "m"
    return call.versions


def test_each_item_is_converted_and_keeps_its_id(
    adapter: Describe, target: RecordingTarget[str]
) -> None:
    """Every item is converted on its own; ids and order are preserved."""
    adapter.set_aspired_versions("m", [ServableData.of(V2, "/m/2"), ServableData.of(V1, "/m/1")])
    assert only_call(target) == (
        ServableData.of(V2, "loader for /m/2"),
        ServableData.of(V1, "loader for /m/1"),
    )


def test_empty_set_is_passed_on(adapter: Describe, target: RecordingTarget[str]) -> None:
    """An empty aspired set (unload everything) reaches the target as an empty set."""
    adapter.set_aspired_versions("m", [])
    assert only_call(target) == ()


def test_error_item_passes_through_unconverted(
    adapter: Describe, target: RecordingTarget[str]
) -> None:
    """An item that already holds an error keeps it and is never handed to convert()."""
    error = DataLossError("version directory vanished")
    adapter.set_aspired_versions("m", [ServableData.failed(V1, error)])
    [out] = only_call(target)
    assert out == ServableData.failed(V1, error)
    assert out.error is error
    assert adapter.converted == []


def test_serving_error_from_convert_becomes_that_items_error_unchanged(
    adapter: Describe, target: RecordingTarget[str]
) -> None:
    """A ServingError raised by convert() is the item's error as is; the other items convert."""
    adapter.set_aspired_versions(
        "m",
        [
            ServableData.of(V1, "/m/1"),
            ServableData.of(V2, "/m/missing"),
            ServableData.of(V3, "/m/3"),
        ],
    )
    first, failed, third = only_call(target)
    assert failed.id == V2
    assert failed.error is MISSING
    assert first == ServableData.of(V1, "loader for /m/1")
    assert third == ServableData.of(V3, "loader for /m/3")


def test_foreign_exception_from_convert_is_wrapped_as_unknown_naming_the_servable(
    adapter: Describe, target: RecordingTarget[str]
) -> None:
    """Any other exception becomes an UNKNOWN error naming the servable id and the cause."""
    adapter.set_aspired_versions("m", [ServableData.of(V2, "/m/broken")])
    [failed] = only_call(target)
    assert failed.id == V2
    assert failed.error is not None
    assert failed.error.code is StatusCode.UNKNOWN
    assert str(V2) in failed.error.message
    assert "ValueError: cannot parse saved_model.pb" in failed.error.message
    assert isinstance(failed.error.__cause__, ValueError)


def test_adapter_holds_its_output_until_connected() -> None:
    """An adapter is a Source: what it converts before it is connected is delivered on connect."""
    adapter = Describe()
    adapter.set_aspired_versions("m", [ServableData.of(V1, "/m/1")])
    target: RecordingTarget[str] = RecordingTarget()
    connect(adapter, target)
    assert only_call(target) == (ServableData.of(V1, "loader for /m/1"),)


def test_error_injecting_adapter_turns_every_item_into_its_error() -> None:
    """ErrorInjectingSourceAdapter replaces each item, data or error, with its error; ids kept."""
    error = UnimplementedError("no adapter for platform 'pytorch'")
    adapter: ErrorInjectingSourceAdapter[StoragePath, Loader] = ErrorInjectingSourceAdapter(error)
    target: RecordingTarget[Loader] = RecordingTarget()
    connect(adapter, target)
    adapter.set_aspired_versions(
        "m", [ServableData.of(V1, "/m/1"), ServableData.failed(V2, DataLossError("gone"))]
    )
    adapter.set_aspired_versions("m", [])
    assert [(c.name, c.versions) for c in target.calls()] == [
        ("m", (ServableData.failed(V1, error), ServableData.failed(V2, error))),
        ("m", ()),
    ]


@pytest.fixture
def monitored_manager() -> Iterator[tuple[AspiredVersionsManager, ServableStateMonitor]]:
    bus: EventBus[ServableState] = EventBus()
    monitor = ServableStateMonitor(bus)
    manager = AspiredVersionsManager(
        AvailabilityPreservingPolicy(), manage_state_interval_s=None, event_bus=bus
    )
    yield manager, monitor
    manager.close()
    monitor.close()


def test_injected_error_reaches_the_manager_as_end_with_that_error(
    monitored_manager: tuple[AspiredVersionsManager, ServableStateMonitor],
) -> None:
    """Wired to a manager, each injected version is published as END carrying the error."""
    manager, monitor = monitored_manager
    error = UnimplementedError("no adapter for platform 'pytorch'")
    source: Source[StoragePath] = Source()
    adapter: ErrorInjectingSourceAdapter[StoragePath, Loader] = ErrorInjectingSourceAdapter(error)
    connect(adapter, manager)
    connect(source, adapter)
    source.emit_aspired_versions("m", [ServableData.of(V1, "/m/1")])
    manager.run_once()
    assert monitor.get_state(V1) == ServableState(V1, ManagerState.END, error)
    assert manager.list_available_servable_ids() == []


def test_conversion_failure_reaches_the_manager_as_end_with_the_error(
    monitored_manager: tuple[AspiredVersionsManager, ServableStateMonitor],
) -> None:
    """A convert() failure travels as data: the manager publishes END with the wrapped error."""
    manager, monitor = monitored_manager

    class Unloadable(UnarySourceAdapter[StoragePath, Loader]):
        """An adapter whose every conversion fails with a non-serving exception."""

        def convert(self, servable_name: str, data: StoragePath) -> Loader:
            raise OSError(f"{data} is unreadable")

    adapter = Unloadable()
    connect(adapter, manager)
    adapter.set_aspired_versions("m", [ServableData.of(V1, "/m/1")])
    manager.run_once()
    state = monitor.get_state(V1)
    assert state is not None
    assert state.manager_state is ManagerState.END
    assert isinstance(state.health, ServingError)
    assert state.health.code is StatusCode.UNKNOWN
    assert "OSError: /m/1 is unreadable" in state.health.message


def test_function_source_adapter_converts_with_its_function() -> None:
    """FunctionSourceAdapter applies its function to each item; an exception is its error."""
    from servinglib.sources.source_adapter import FunctionSourceAdapter

    def parse(data: str) -> int:
        return int(data)

    adapter: FunctionSourceAdapter[str, int] = FunctionSourceAdapter(parse)
    good, bad = adapter.adapt(
        "m",
        [ServableData.of(ServableId("m", 1), "41"), ServableData.of(ServableId("m", 2), "x")],
    )
    assert good.data == 41
    assert bad.error is not None
    assert "Preparing servable {name: m version: 2} failed: ValueError" in bad.error.message
