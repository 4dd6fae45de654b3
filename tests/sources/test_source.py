"""Tests for servinglib.sources.source: held emissions, connecting once, serialized delivery."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from servinglib.core.servable_data import ServableData
from servinglib.core.servable_id import ServableId
from servinglib.errors import FailedPreconditionError
from servinglib.sources.source import Source, StoragePath

TIMEOUT_S = 10.0

Call = tuple[str, list[ServableData[StoragePath]]]


def item(name: str, version: int) -> ServableData[StoragePath]:
    """Version ``version`` of ``name`` at a made-up path."""
    return ServableData.of(ServableId(name, version), f"/models/{name}/{version}")


class Recorder:
    """An aspired-versions callback that records each call."""

    def __init__(self) -> None:
        self.calls: list[Call] = []

    def __call__(self, servable_name: str, versions: Sequence[ServableData[StoragePath]]) -> None:
        self.calls.append((servable_name, list(versions)))


class HookedSource(Source[StoragePath]):
    """A source that records, each time its connect hook runs, what had been delivered."""

    def __init__(self, recorder: Recorder) -> None:
        super().__init__()
        self._recorder = recorder
        self.delivered_when_connected: list[list[Call]] = []

    def _on_connected(self) -> None:
        self.delivered_when_connected.append(list(self._recorder.calls))


def join(thread: threading.Thread) -> None:
    thread.join(TIMEOUT_S)
    assert not thread.is_alive(), f"{thread.name} did not finish within {TIMEOUT_S} s"


def test_emissions_before_connect_are_held_and_delivered_on_connect_in_order() -> None:
    """Emissions made before the callback is set reach it on connect, in the order made."""
    source: Source[StoragePath] = Source()
    recorder = Recorder()
    source.emit_aspired_versions("a", [item("a", 1)])
    source.emit_aspired_versions("b", [item("b", 1), item("b", 2)])
    assert recorder.calls == []
    source.set_aspired_versions_callback(recorder)
    assert recorder.calls == [("a", [item("a", 1)]), ("b", [item("b", 1), item("b", 2)])]


def test_only_the_latest_held_emission_per_name_is_delivered() -> None:
    """A name emitted several times before connect is delivered once, with its latest set."""
    source: Source[StoragePath] = Source()
    recorder = Recorder()
    source.emit_aspired_versions("a", [item("a", 1)])
    source.emit_aspired_versions("a", [item("a", 1), item("a", 2)])
    source.emit_aspired_versions("a", [item("a", 2)])
    source.set_aspired_versions_callback(recorder)
    assert recorder.calls == [("a", [item("a", 2)])]


def test_a_held_empty_set_is_delivered() -> None:
    """An empty set held for a name (unload everything) replaces the earlier one and is sent."""
    source: Source[StoragePath] = Source()
    recorder = Recorder()
    source.emit_aspired_versions("a", [item("a", 1)])
    source.emit_aspired_versions("a", [])
    source.set_aspired_versions_callback(recorder)
    assert recorder.calls == [("a", [])]


def test_held_emissions_are_delivered_only_once() -> None:
    """After connect the held emissions are gone: later emissions are not preceded by repeats."""
    source: Source[StoragePath] = Source()
    recorder = Recorder()
    source.emit_aspired_versions("a", [item("a", 1)])
    source.set_aspired_versions_callback(recorder)
    source.emit_aspired_versions("b", [item("b", 1)])
    assert recorder.calls == [("a", [item("a", 1)]), ("b", [item("b", 1)])]


def test_emissions_after_connect_go_straight_through_in_order() -> None:
    """Once connected, each emission reaches the callback before emit returns, in order."""
    source: Source[StoragePath] = Source()
    recorder = Recorder()
    source.set_aspired_versions_callback(recorder)
    source.emit_aspired_versions("a", [item("a", 1)])
    assert recorder.calls == [("a", [item("a", 1)])]
    source.emit_aspired_versions("a", [item("a", 1), item("a", 2)])
    source.emit_aspired_versions("a", [])
    assert recorder.calls == [
        ("a", [item("a", 1)]),
        ("a", [item("a", 1), item("a", 2)]),
        ("a", []),
    ]


def test_connecting_twice_fails_and_keeps_the_first_callback() -> None:
    """A second callback raises FailedPreconditionError; emissions still go to the first only."""
    source: Source[StoragePath] = Source()
    first, second = Recorder(), Recorder()
    source.set_aspired_versions_callback(first)
    with pytest.raises(FailedPreconditionError):
        source.set_aspired_versions_callback(second)
    source.emit_aspired_versions("a", [item("a", 1)])
    assert first.calls == [("a", [item("a", 1)])]
    assert second.calls == []


def test_connect_hook_runs_once_after_held_emissions_are_delivered() -> None:
    """_on_connected runs once per source, after the held emissions reached the callback."""
    recorder = Recorder()
    source = HookedSource(recorder)
    source.emit_aspired_versions("a", [item("a", 1)])
    source.set_aspired_versions_callback(recorder)
    with pytest.raises(FailedPreconditionError):
        source.set_aspired_versions_callback(Recorder())
    assert source.delivered_when_connected == [[("a", [item("a", 1)])]]


def test_callback_runs_under_the_emit_lock() -> None:
    """Held and direct deliveries both run with the emit lock held: emissions are serialized.

    White-box on purpose: a stress test rarely catches two callbacks overlapping.
    """
    source: Source[StoragePath] = Source()
    lock_held: list[bool] = []

    def callback(servable_name: str, versions: Sequence[ServableData[StoragePath]]) -> None:
        lock_held.append(source._emit_lock.locked())

    source.emit_aspired_versions("a", [item("a", 1)])
    source.set_aspired_versions_callback(callback)
    source.emit_aspired_versions("b", [item("b", 1)])
    assert lock_held == [True, True]


def test_concurrent_emitters_deliver_every_emission_exactly_once_in_order() -> None:
    """Emitters racing each other and the connect: each emission arrives once, per-thread order.

    Every emission names its own servable, so none is superseded while held.
    Each emitter makes half its emissions before the connect (held) and half
    racing it; the callback is never entered by two threads at once.
    """
    num_threads, per_thread = 8, 200
    source: Source[StoragePath] = Source()
    calls: list[str] = []
    guard = threading.Lock()
    inside = 0
    overlaps = 0

    def callback(servable_name: str, versions: Sequence[ServableData[StoragePath]]) -> None:
        nonlocal inside, overlaps
        with guard:
            inside += 1
            overlaps += inside > 1
        calls.append(servable_name)
        with guard:
            inside -= 1

    start = threading.Barrier(num_threads)
    halfway = threading.Barrier(num_threads + 1)

    def emit(thread_index: int) -> None:
        start.wait(TIMEOUT_S)
        for n in range(per_thread):
            if n == per_thread // 2:
                halfway.wait(TIMEOUT_S)
            name = f"t{thread_index}-{n}"
            source.emit_aspired_versions(name, [item(name, n)])

    def connect() -> None:
        halfway.wait(TIMEOUT_S)
        source.set_aspired_versions_callback(callback)

    threads = [threading.Thread(target=emit, args=(i,)) for i in range(num_threads)]
    threads.append(threading.Thread(target=connect))
    for thread in threads:
        thread.start()
    for thread in threads:
        join(thread)

    expected = {f"t{i}-{n}" for i in range(num_threads) for n in range(per_thread)}
    assert len(calls) == len(expected)
    assert set(calls) == expected
    for i in range(num_threads):
        mine = [name for name in calls if name.startswith(f"t{i}-")]
        assert mine == [f"t{i}-{n}" for n in range(per_thread)]
    assert overlaps == 0
