"""Triton's dynamic batcher's priority levels and queue policies: requests taken level by level
(1 first), a level's timeout rejecting or delaying what waits too long, a level's bound."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from servinglib.errors import DeadlineExceededError, InvalidArgumentError, ServingError, StatusCode
from servinglib.loaders.triton.batch_queue_policy import QueuePolicy, dynamic_batching
from servinglib.loaders.triton.config import parse_model_config
from servinglib.request_extras import RequestExtras
from servinglib.testing import wait_until

PRIORITIES = (
    "max_queue_delay_microseconds: 0 priority_levels: 3 default_priority_level: 2 "
    "priority_queue_policy { key: 3 value: { max_queue_size: 1 } }"
)


def test_requests_run_level_by_level_then_in_arrival_order(serve: Any) -> None:
    """While execute() is held: 3, default (2), 1, 2, out of range (the default, 2), 1; the
    next execute() gets level 1's, then level 2's, then level 3's, each in arrival order."""
    client = serve(PRIORITIES)
    first = client.hold()
    sent = [
        client.send([30], priority=3),
        client.send([20]),
        client.send([10], priority=1),
        client.send([21], priority=2),
        client.send([22], priority=7),
        client.send([11], priority=1),
    ]
    client.wait_queued(6)
    client.model.gate.set()

    for future in [first, *sent]:
        future.result(10)
    assert client.model.orders == [[0], [10, 11, 20, 21, 22, 30]]


def test_a_level_holds_at_most_its_max_queue_size(serve: Any) -> None:
    """Level 3 holds one request: a second is UNAVAILABLE, as Triton words it; level 2 is not
    bounded by it."""
    client = serve(PRIORITIES)
    first = client.hold()
    held = [client.send([30], priority=3), client.send([20]), client.send([21])]
    client.wait_queued(3)

    with pytest.raises(ServingError, match=r"^Exceeds maximum queue size$") as caught:
        client.send([31], priority=3).result(10)
    client.model.gate.set()

    assert caught.value.code is StatusCode.UNAVAILABLE
    assert [f.result(10)["Y"].tolist() for f in [first, *held]] == [[[0]], [[60]], [[40]], [[42]]]


def test_a_request_waiting_past_its_queue_timeout_is_rejected_unrun(serve: Any) -> None:
    """default_timeout 50 ms (REJECT): the request fails UNAVAILABLE with Triton's words while
    execute() is still held, and execute() never sees it."""
    client = serve(
        "max_queue_delay_microseconds: 0 "
        "default_queue_policy { default_timeout_microseconds: 50000 }"
    )
    first = client.hold()
    late = client.send([1])
    with pytest.raises(ServingError, match=r"^Request timeout expired$") as caught:
        late.result(10)
    client.model.gate.set()
    first.result(10)

    assert caught.value.code is StatusCode.UNAVAILABLE
    assert client.model.orders == [[0]]
    wait_until(lambda: client.released == 2)


def test_an_awaited_request_past_its_queue_timeout_is_rejected(serve: Any) -> None:
    """The same for a call awaited on an event loop (the async front ends')."""
    client = serve(
        "max_queue_delay_microseconds: 0 "
        "default_queue_policy { default_timeout_microseconds: 50000 }"
    )
    first = client.hold()

    async def late() -> None:
        with pytest.raises(ServingError, match=r"^Request timeout expired$"):
            await client.call(1)

    try:
        asyncio.run(late())
    finally:
        client.model.gate.set()
    first.result(10)
    assert client.model.orders == [[0]]


def test_a_request_may_only_shorten_the_timeout_when_the_policy_allows(serve: Any) -> None:
    """allow_timeout_override: a request's 50 ms timeout wins over the policy's 60 s; a
    request's 120 s does not lengthen it (that request waits on and runs)."""
    client = serve(
        "max_queue_delay_microseconds: 0 default_queue_policy { "
        "default_timeout_microseconds: 60000000 allow_timeout_override: true }"
    )
    first = client.hold()
    longer = client.send([2], timeout_us=120_000_000)
    shorter = client.send([1], timeout_us=50_000)
    started = time.monotonic()
    with pytest.raises(ServingError, match=r"^Request timeout expired$"):
        shorter.result(10)
    assert time.monotonic() - started < 30
    client.model.gate.set()

    assert longer.result(10)["Y"].tolist() == [[4]]
    first.result(10)
    assert client.model.orders == [[0], [2]]


def test_without_an_override_a_requests_timeout_is_ignored(serve: Any) -> None:
    """No allow_timeout_override: a request's timeout does not shorten the policy's."""
    client = serve(
        "max_queue_delay_microseconds: 0 "
        "default_queue_policy { default_timeout_microseconds: 60000000 }"
    )
    first = client.hold()
    waiting = client.send([1], timeout_us=1)
    client.wait_queued(1)
    time.sleep(0.05)  # its own timeout long past: it must still wait
    client.model.gate.set()

    assert waiting.result(10)["Y"].tolist() == [[2]]
    first.result(10)


def test_a_delayed_request_goes_behind_its_levels_requests_in_time(serve: Any) -> None:
    """DELAY: a request past its 50 ms timeout is not rejected; the next execute() gets the
    level's requests still in time first."""
    client = serve(
        "max_queue_delay_microseconds: 0 default_queue_policy { "
        "timeout_action: DELAY default_timeout_microseconds: 50000 }"
    )
    first = client.hold()
    old = client.send([1])
    client.wait_queued(1)
    time.sleep(0.1)  # past its timeout
    fresh = [client.send([2]), client.send([3])]
    client.wait_queued(3)
    client.model.gate.set()

    for future in [first, old, *fresh]:
        future.result(10)
    assert client.model.orders == [[0], [2, 3, 1]]


def test_the_request_parameters_priority_and_timeout_are_read() -> None:
    """V2 parameters ``priority`` and ``timeout`` (µs) steer the queue, never the model; a
    negative or non-integer one is INVALID_ARGUMENT."""
    extras = RequestExtras.of_request("", {"priority": 2, "timeout": 5000, "who": "a"})
    assert (extras.priority, extras.timeout_us, dict(extras.parameters)) == (2, 5000, {"who": "a"})
    for bad in ({"priority": -1}, {"timeout": 1.5}, {"priority": True}, {"timeout": "5"}):
        with pytest.raises(InvalidArgumentError, match="must be a non-negative integer"):
            RequestExtras.of_request("", bad)


def test_the_config_reads_levels_and_policies_and_refuses_levels_out_of_range() -> None:
    text = (
        'name: "m" backend: "python" max_batch_size: 4 dynamic_batching { '
        "priority_levels: 2 default_priority_level: 1 "
        "default_queue_policy { timeout_action: DELAY default_timeout_microseconds: 2000 } "
        "priority_queue_policy { key: 2 value: { max_queue_size: 3 allow_timeout_override: true "
        "default_timeout_microseconds: 1000 } } }"
    )
    options = dynamic_batching(parse_model_config(text, "m"))
    assert options is not None
    assert [options.level_of(p) for p in (0, 1, 2, 3)] == [1, 1, 2, 1]
    assert options.policy_of(1) == QueuePolicy(timeout_s=0.002, delay=True)
    assert options.policy_of(2) == QueuePolicy(
        timeout_s=0.001, allow_timeout_override=True, max_queue_size=3
    )
    for wrong, message in (
        ("priority_levels: 2 default_priority_level: 3", "default_priority_level must be in 1..2"),
        ("priority_levels: 2", "default_priority_level must be in 1..2"),
        (
            "priority_levels: 1 default_priority_level: 1 "
            "priority_queue_policy { key: 2 value: { } }",
            "has level 2, outside 1..1",
        ),
    ):
        config = parse_model_config(
            f'name: "m" backend: "python" max_batch_size: 4 dynamic_batching {{ {wrong} }}', "m"
        )
        with pytest.raises(InvalidArgumentError, match=message):
            dynamic_batching(config)


def test_a_batch_holds_only_requests_with_its_first_requests_inputs(serve: Any) -> None:
    """With an optional input, requests that give it and requests that do not never share an
    execute(), as in Triton: a batch ends at the first request of other inputs."""
    client = serve("max_queue_delay_microseconds: 0", optional_b=True)
    first = client.hold()
    sent = [
        client.send([1], with_b=True),
        client.send([2], with_b=True),
        client.send([3]),
        client.send([4], with_b=True),
    ]
    client.wait_queued(4)
    client.model.gate.set()

    for future in [first, *sent]:
        future.result(10)
    assert client.model.orders == [[0], [1, 2], [3], [4]]


def test_a_levels_own_bound_replaces_the_batchers(serve: Any) -> None:
    """Level 1 holds up to its max_queue_size of 100, past the batcher's own bound of
    10 x max_batch_size (80) that only the levels without a bound share: with 85 waiting at
    level 1, a request at level 2 is refused, one more at level 1 is not."""
    client = serve(
        "max_queue_delay_microseconds: 0 priority_levels: 2 default_priority_level: 2 "
        "priority_queue_policy { key: 1 value: { max_queue_size: 100 } }"
    )
    first = client.hold()
    waiting = [client.send([x], priority=1) for x in range(1, 86)]
    client.wait_queued(85)

    with pytest.raises(ServingError, match=r"^Exceeds maximum queue size$"):
        client.send([200], priority=2).result(10)
    one_more = client.send([86], priority=1)
    client.wait_queued(86)
    client.model.gate.set()

    for future in [first, *waiting, one_more]:
        future.result(10)


def test_requests_answered_in_the_queue_leave_room_for_new_ones(serve: Any) -> None:
    """max_queue_size 2, both places taken by requests whose queue timeout passed while
    execute() is held: a third request is queued (the answered ones hold no place), as
    Triton rejects timed-out requests while it waits for an instance."""
    client = serve(
        "max_queue_delay_microseconds: 0 "
        "default_queue_policy { max_queue_size: 2 default_timeout_microseconds: 500000 }"
    )
    first = client.hold()
    late = [client.send([1]), client.send([2])]
    for future in late:
        with pytest.raises(ServingError, match=r"^Request timeout expired$"):
            future.result(10)
    third = client.send([3])  # (its own 500 ms: ample to be queued and run)
    client.wait_queued(1)
    client.model.gate.set()

    assert third.result(10)["Y"].tolist() == [[6]]
    first.result(10)
    assert client.model.orders == [[0], [3]]


def test_delayed_requests_answered_in_the_queue_leave_room_for_new_ones(serve: Any) -> None:
    """DELAY, max_queue_size 2: two requests past their 50 ms timeout wait on behind (and
    still hold their places: a third is refused); once their deadlines pass they hold none,
    and a fourth is queued."""
    client = serve(
        "max_queue_delay_microseconds: 0 default_queue_policy { max_queue_size: 2 "
        "timeout_action: DELAY default_timeout_microseconds: 50000 }"
    )
    first = client.hold()
    late = [client.send([1], deadline_s=0.5), client.send([2], deadline_s=0.5)]
    client.wait_queued(2)
    time.sleep(0.15)  # past their queue timeout, not their deadline
    with pytest.raises(ServingError, match=r"^Exceeds maximum queue size$"):
        client.send([3]).result(10)
    for future in late:
        with pytest.raises(DeadlineExceededError):
            future.result(10)
    fourth = client.send([4])
    client.wait_queued(1)
    client.model.gate.set()

    assert fourth.result(10)["Y"].tolist() == [[8]]
    first.result(10)
    assert client.model.orders == [[0], [4]]
