"""Tests for servinglib.sources.source_router: static and dynamic routing by servable name."""

from __future__ import annotations

from typing import TypeVar

import pytest

from servinglib.core.servable_data import ServableData
from servinglib.core.servable_id import ServableId
from servinglib.errors import InvalidArgumentError, UnimplementedError
from servinglib.sources.source import Source, StoragePath
from servinglib.sources.source_adapter import (
    ErrorInjectingSourceAdapter,
    SourceAdapter,
    UnarySourceAdapter,
)
from servinglib.sources.source_router import DynamicSourceRouter, SourceRouter, StaticSourceRouter
from servinglib.sources.target import connect
from servinglib.testing import RecordingTarget

T = TypeVar("T")


class Prefix(UnarySourceAdapter[StoragePath, str]):
    """Stands in for one platform's adapter: converts a path to "<platform>:<path>"."""

    def __init__(self, platform: str) -> None:
        super().__init__()
        self._platform = platform

    def convert(self, servable_name: str, data: StoragePath) -> str:
        return f"{self._platform}:{data}"


def item(name: str, version: int = 1) -> ServableData[StoragePath]:
    """Version ``version`` of ``name`` at a made-up path."""
    return ServableData.of(ServableId(name, version), f"/models/{name}/{version}")


def record_ports(router: SourceRouter[StoragePath]) -> list[RecordingTarget[StoragePath]]:
    """Connects a recording target to each of ``router``'s output ports."""
    targets: list[RecordingTarget[StoragePath]] = []
    for port in router.output_ports:
        target: RecordingTarget[StoragePath] = RecordingTarget()
        connect(port, target)
        targets.append(target)
    return targets


def received(target: RecordingTarget[T]) -> list[tuple[str, tuple[ServableData[T], ...]]]:
    """Each (name, versions) ``target`` received, oldest first."""
    return [(call.name, call.versions) for call in target.calls()]


def received_names(target: RecordingTarget[T]) -> list[str]:
    """The servable names ``target`` received, in order."""
    return [call.name for call in target.calls()]


def send(router: SourceRouter[StoragePath], *names: str) -> None:
    """Emits version 1 of each name into ``router``."""
    for name in names:
        router.set_aspired_versions(name, [item(name)])


# -- StaticSourceRouter ------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "port"),
    [
        ("tf_resnet", 0),
        ("resnet_onnx", 1),
        ("tf_onnx_export", 0),  # both match: the first substring wins
        ("onnx_then_tf", 0),  # order of the substrings, not of their positions in the name
        ("bert", 2),
        ("TF_upper", 2),  # matching is case-sensitive
    ],
)
def test_static_router_routes_by_first_matching_substring(name: str, port: int) -> None:
    """Port i takes names containing substring i, the first that matches; others the last port."""
    router: StaticSourceRouter[StoragePath] = StaticSourceRouter(["tf", "onnx"])
    targets = record_ports(router)
    assert router.route(name) == port
    send(router, name)
    assert [received(t) for t in targets] == [
        [(name, (item(name),))] if i == port else [] for i in range(3)
    ]


def test_static_router_has_one_port_per_substring_plus_the_default() -> None:
    """With no substrings there is a single port, and every name goes to it."""
    assert len(StaticSourceRouter[StoragePath](["tf", "onnx"]).output_ports) == 3
    router: StaticSourceRouter[StoragePath] = StaticSourceRouter([])
    [target] = record_ports(router)
    send(router, "a", "b")
    assert received_names(target) == ["a", "b"]


# -- DynamicSourceRouter -----------------------------------------------------


def test_dynamic_router_routes_by_exact_name_and_unknown_names_to_the_last_port() -> None:
    """Names in the table go to their port; others, even near-misses, go to the default port."""
    router: DynamicSourceRouter[StoragePath] = DynamicSourceRouter(3, {"a": 0, "b": 1})
    targets = record_ports(router)
    send(router, "a", "b", "c", "aa", "A")
    assert [received_names(t) for t in targets] == [["a"], ["b"], ["c", "aa", "A"]]


def test_dynamic_router_without_routes_sends_everything_to_the_default_port() -> None:
    """With no table every name goes to the last port."""
    router: DynamicSourceRouter[StoragePath] = DynamicSourceRouter(2)
    targets = record_ports(router)
    send(router, "a", "b")
    assert [received_names(t) for t in targets] == [[], ["a", "b"]]


def test_route_update_applies_to_the_next_emission_and_resends_nothing() -> None:
    """After update_routes the next emission of a name takes the new port; nothing is re-sent."""
    router: DynamicSourceRouter[StoragePath] = DynamicSourceRouter(3, {"a": 0})
    targets = record_ports(router)
    send(router, "a", "b")
    router.update_routes({"a": 1, "b": 0})
    assert [received_names(t) for t in targets] == [["a"], [], ["b"]]
    send(router, "a", "b")
    assert [received_names(t) for t in targets] == [["a", "b"], ["a"], ["b"]]
    assert router.routes == {"a": 1, "b": 0}


def test_route_update_replaces_the_whole_table() -> None:
    """A name left out of the new table falls back to the default port."""
    router: DynamicSourceRouter[StoragePath] = DynamicSourceRouter(3, {"a": 0, "b": 1})
    router.update_routes({"b": 0})
    assert (router.route("a"), router.route("b")) == (2, 0)


@pytest.mark.parametrize("bad_port", [-1, 2, 3])
def test_invalid_route_update_is_rejected_and_the_old_table_stays(bad_port: int) -> None:
    """A port that is negative or not below the default port raises; routing is unchanged."""
    router: DynamicSourceRouter[StoragePath] = DynamicSourceRouter(3, {"a": 0})
    targets = record_ports(router)
    with pytest.raises(InvalidArgumentError, match=f"port {bad_port}"):
        router.update_routes({"b": 1, "a": bad_port})
    assert router.routes == {"a": 0}
    send(router, "a", "b")
    assert [received_names(t) for t in targets] == [["a"], [], ["b"]]


@pytest.mark.parametrize("bad_port", [-1, 1, 2])
def test_invalid_initial_routes_are_rejected(bad_port: int) -> None:
    """The constructor validates its table like update_routes does."""
    with pytest.raises(InvalidArgumentError):
        DynamicSourceRouter[StoragePath](2, {"a": bad_port})


def test_routes_property_is_a_copy() -> None:
    """Changing the mapping returned by routes does not change routing."""
    router: DynamicSourceRouter[StoragePath] = DynamicSourceRouter(2, {"a": 0})
    routes = router.routes
    assert isinstance(routes, dict)
    routes["a"] = 1
    routes["b"] = 0
    assert router.routes == {"a": 0}
    assert (router.route("a"), router.route("b")) == (0, 1)


@pytest.mark.parametrize("num_output_ports", [0, -1])
def test_a_router_needs_at_least_one_output_port(num_output_ports: int) -> None:
    """num_output_ports < 1 raises InvalidArgumentError."""
    with pytest.raises(InvalidArgumentError):
        DynamicSourceRouter[StoragePath](num_output_ports)


def test_output_ports_are_fixed() -> None:
    """output_ports returns the same port objects every time."""
    router: DynamicSourceRouter[StoragePath] = DynamicSourceRouter(3)
    first, second = router.output_ports, router.output_ports
    assert len(first) == 3
    assert all(a is b for a, b in zip(first, second, strict=True))


def test_ports_hold_emissions_until_connected() -> None:
    """Each port is a Source: what is routed to it before it is connected arrives on connect."""
    router: DynamicSourceRouter[StoragePath] = DynamicSourceRouter(2, {"a": 0})
    send(router, "a", "b")
    targets = record_ports(router)
    assert [received_names(t) for t in targets] == [["a"], ["b"]]


# -- the per-platform wiring -------------------------------------------------


def test_router_feeds_one_adapter_per_platform_and_unknown_ones_an_error() -> None:
    """Source → router → an adapter per platform → its own target; unknown platforms get errors.

    This is how one storage source serves models of several platforms.
    """
    source: Source[StoragePath] = Source()
    router: DynamicSourceRouter[StoragePath] = DynamicSourceRouter(3, {"resnet": 0, "bert": 1})
    unknown = UnimplementedError("no platform configured")
    adapters: list[SourceAdapter[StoragePath, str]] = [
        Prefix("tensorflow"),
        Prefix("onnx"),
        ErrorInjectingSourceAdapter(unknown),
    ]
    targets: list[RecordingTarget[str]] = []
    for port, adapter in zip(router.output_ports, adapters, strict=True):
        target: RecordingTarget[str] = RecordingTarget()
        connect(adapter, target)
        connect(port, adapter)
        targets.append(target)
    connect(source, router)

    source.emit_aspired_versions("resnet", [item("resnet", 1), item("resnet", 2)])
    source.emit_aspired_versions("bert", [item("bert", 7)])
    source.emit_aspired_versions("gpt", [item("gpt", 1)])

    resnet1, resnet2 = ServableId("resnet", 1), ServableId("resnet", 2)
    assert received(targets[0]) == [
        (
            "resnet",
            (
                ServableData.of(resnet1, "tensorflow:/models/resnet/1"),
                ServableData.of(resnet2, "tensorflow:/models/resnet/2"),
            ),
        )
    ]
    assert received(targets[1]) == [
        ("bert", (ServableData.of(ServableId("bert", 7), "onnx:/models/bert/7"),))
    ]
    assert received(targets[2]) == [("gpt", (ServableData.failed(ServableId("gpt", 1), unknown),))]
