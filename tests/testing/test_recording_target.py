"""Tests for servinglib.testing.RecordingTarget: a Target that records what a Source sends."""

from __future__ import annotations

import threading
import time

from servinglib.core.servable_data import ServableData
from servinglib.core.servable_id import ServableId
from servinglib.errors import NotFoundError
from servinglib.sources import Source, StoragePath, connect
from servinglib.testing import RecordingTarget

TIMEOUT_S = 10.0


def version(name: str, number: int) -> ServableData[StoragePath]:
    """Version ``number`` of ``name`` at a made-up path."""
    return ServableData.of(ServableId(name, number), f"/models/{name}/{number}")


def test_records_each_call_in_order_with_its_name_and_versions() -> None:
    """Every call is kept, oldest first, with the name and the aspired set exactly as sent."""
    target: RecordingTarget[StoragePath] = RecordingTarget()
    missing: ServableData[StoragePath] = ServableData.failed(
        ServableId("b", 7), NotFoundError("gone")
    )
    target.set_aspired_versions("a", [version("a", 2), version("a", 1)])
    target.set_aspired_versions("b", [missing])
    target.set_aspired_versions("a", [])
    assert [(c.name, c.versions) for c in target.calls()] == [
        ("a", (version("a", 2), version("a", 1))),
        ("b", (missing,)),
        ("a", ()),
    ]
    assert [c.version_numbers for c in target.calls()] == [(2, 1), (7,), ()]


def test_call_time_is_taken_on_arrival() -> None:
    """time_s is the time.perf_counter() reading when set_aspired_versions ran."""
    target: RecordingTarget[StoragePath] = RecordingTarget()
    before = time.perf_counter()
    target.set_aspired_versions("a", [version("a", 1)])
    after = time.perf_counter()
    [call] = target.calls()
    assert before <= call.time_s <= after


def test_calls_filters_by_name() -> None:
    """calls(name) holds only that servable's calls, still oldest first."""
    target: RecordingTarget[StoragePath] = RecordingTarget()
    for name, number in [("a", 1), ("b", 1), ("a", 2), ("ab", 3)]:
        target.set_aspired_versions(name, [version(name, number)])
    assert [c.version_numbers for c in target.calls("a")] == [(1,), (2,)]
    assert [c.name for c in target.calls("b")] == ["b"]
    assert target.calls("c") == []


def test_calls_returns_a_copy() -> None:
    """Changing the list calls() returned does not change what the target recorded."""
    target: RecordingTarget[StoragePath] = RecordingTarget()
    target.set_aspired_versions("a", [version("a", 1)])
    target.calls().clear()
    assert len(target.calls()) == 1


def test_last_is_the_latest_set_for_the_name_and_none_for_unknown_names() -> None:
    """last(name) is the most recent set sent for name (even an empty one); None if none was."""
    target: RecordingTarget[StoragePath] = RecordingTarget()
    assert target.last("a") is None
    target.set_aspired_versions("a", [version("a", 1)])
    target.set_aspired_versions("b", [version("b", 5)])
    assert target.last("a") == (version("a", 1),)
    target.set_aspired_versions("a", [])
    assert target.last("a") == ()
    assert target.last("b") == (version("b", 5),)
    assert target.last("c") is None


def test_clear_forgets_earlier_calls_and_keeps_recording() -> None:
    """After clear() nothing is recorded; calls arriving afterwards are."""
    target: RecordingTarget[StoragePath] = RecordingTarget()
    target.set_aspired_versions("a", [version("a", 1)])
    target.clear()
    assert target.calls() == []
    assert target.last("a") is None
    target.set_aspired_versions("a", [version("a", 2)])
    assert [c.version_numbers for c in target.calls()] == [(2,)]


def test_concurrent_senders_are_all_recorded() -> None:
    """Calls made from several threads at once are all kept, each thread's in its own order."""
    target: RecordingTarget[StoragePath] = RecordingTarget()
    senders, calls_each = 8, 200
    start_line = threading.Barrier(senders, timeout=TIMEOUT_S)

    def send(name: str) -> None:
        start_line.wait()
        for number in range(calls_each):
            target.set_aspired_versions(name, [version(name, number)])

    threads = [threading.Thread(target=send, args=(f"m{i}",)) for i in range(senders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT_S)
        assert not thread.is_alive()
    assert len(target.calls()) == senders * calls_each
    for i in range(senders):
        numbers = [c.version_numbers for c in target.calls(f"m{i}")]
        assert numbers == [(number,) for number in range(calls_each)]


def test_records_a_source_through_connect() -> None:
    """Connected to a Source, it gets the held emission on connect and every later one."""
    source: Source[StoragePath] = Source()
    target: RecordingTarget[StoragePath] = RecordingTarget()
    source.emit_aspired_versions("a", [version("a", 1)])
    connect(source, target)
    assert target.last("a") == (version("a", 1),)
    source.emit_aspired_versions("a", [version("a", 2)])
    source.emit_aspired_versions("b", [version("b", 1)])
    assert [(c.name, c.version_numbers) for c in target.calls()] == [
        ("a", (1,)),
        ("a", (2,)),
        ("b", (1,)),
    ]
