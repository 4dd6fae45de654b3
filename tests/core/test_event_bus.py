"""Tests for servinglib.core.event_bus."""

from __future__ import annotations

import logging
import threading

import pytest

from servinglib.core.event_bus import EventBus

TIMEOUT_S = 10.0


def test_delivers_events_in_publish_order() -> None:
    """A subscriber receives every event, in the order published."""
    bus: EventBus[int] = EventBus()
    seen: list[int] = []
    bus.subscribe(seen.append)

    for event in range(5):
        bus.publish(event)

    assert seen == [0, 1, 2, 3, 4]


def test_publish_without_subscribers_is_a_no_op() -> None:
    """Publishing with nobody subscribed neither fails nor blocks."""
    bus: EventBus[str] = EventBus()

    bus.publish("nobody listens")


def test_every_subscriber_gets_every_event() -> None:
    """Several subscribers each receive every event, in subscription order per event."""
    bus: EventBus[str] = EventBus()
    log: list[tuple[str, str]] = []
    bus.subscribe(lambda event: log.append(("first", event)))
    bus.subscribe(lambda event: log.append(("second", event)))

    bus.publish("a")
    bus.publish("b")

    assert log == [("first", "a"), ("second", "a"), ("first", "b"), ("second", "b")]


def test_only_events_after_subscribing_arrive() -> None:
    """A subscriber sees no events published before it subscribed."""
    bus: EventBus[int] = EventBus()
    bus.publish(1)
    seen: list[int] = []
    bus.subscribe(seen.append)

    bus.publish(2)

    assert seen == [2]


def test_cancel_stops_delivery() -> None:
    """After cancel(), a subscriber receives nothing more; cancelling again is harmless."""
    bus: EventBus[int] = EventBus()
    seen: list[int] = []
    subscription = bus.subscribe(seen.append)
    bus.publish(1)

    subscription.cancel()
    subscription.cancel()
    bus.publish(2)

    assert seen == [1]


def test_subscription_as_context_manager_cancels_on_exit() -> None:
    """Leaving a `with subscription:` block cancels it."""
    bus: EventBus[int] = EventBus()
    seen: list[int] = []

    with bus.subscribe(seen.append):
        bus.publish(1)
    bus.publish(2)

    assert seen == [1]


def test_same_callback_twice_is_two_subscriptions() -> None:
    """One callback subscribed twice gets each event twice; cancelling one keeps the other."""
    bus: EventBus[int] = EventBus()
    seen: list[int] = []
    first = bus.subscribe(seen.append)
    bus.subscribe(seen.append)
    bus.publish(1)

    first.cancel()
    bus.publish(2)

    assert seen == [1, 1, 2]


def test_raising_subscriber_does_not_stop_others(caplog: pytest.LogCaptureFixture) -> None:
    """A subscriber that raises is logged and the subscribers after it still get the event."""
    bus: EventBus[int] = EventBus()
    seen: list[int] = []

    def explode(event: int) -> None:
        raise RuntimeError(f"subscriber broke on {event}")

    bus.subscribe(explode)
    bus.subscribe(seen.append)

    with caplog.at_level(logging.ERROR, logger="servinglib.core.event_bus"):
        bus.publish(1)
        bus.publish(2)

    assert seen == [1, 2]
    assert [record.exc_info[0] for record in caplog.records if record.exc_info] == [
        RuntimeError,
        RuntimeError,
    ]


def test_subscriber_added_during_delivery_gets_later_events_only() -> None:
    """A callback that subscribes another one does not deliver the current event to it."""
    bus: EventBus[int] = EventBus()
    late: list[int] = []
    subscribed = threading.Event()

    def subscribe_late(_event: int) -> None:
        if not subscribed.is_set():
            subscribed.set()
            bus.subscribe(late.append)

    bus.subscribe(subscribe_late)
    bus.publish(1)
    bus.publish(2)

    assert late == [2]


def test_concurrent_publishers_deliver_each_event_once_to_everyone() -> None:
    """Events published from several threads reach every subscriber exactly once, in one order."""
    publishers, per_publisher = 4, 200
    bus: EventBus[tuple[int, int]] = EventBus()
    received: list[list[tuple[int, int]]] = [[], [], []]
    for seen in received:
        bus.subscribe(seen.append)
    start = threading.Barrier(publishers, timeout=TIMEOUT_S)

    def publish_all(publisher: int) -> None:
        start.wait()
        for sequence in range(per_publisher):
            bus.publish((publisher, sequence))

    threads = [threading.Thread(target=publish_all, args=(p,)) for p in range(publishers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT_S)
    assert not any(thread.is_alive() for thread in threads)

    expected = {(p, s) for p in range(publishers) for s in range(per_publisher)}
    for seen in received:
        assert len(seen) == len(expected)
        assert set(seen) == expected
        for publisher in range(publishers):
            assert [s for p, s in seen if p == publisher] == list(range(per_publisher))
    assert received[0] == received[1] == received[2]
