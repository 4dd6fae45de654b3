"""DataPlane.open_stream: parts in order, errors in band, bounded read-ahead, close and deadline."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import pytest

from servinglib.errors import (
    DeadlineExceededError,
    FailedPreconditionError,
    InvalidArgumentError,
    StatusCode,
    UnavailableError,
)
from servinglib.server.observe.call_record import StreamRecord
from servinglib.server.plane.data_plane import DataPlane
from servinglib.server.plane.stream_limits import StreamLimits
from servinglib.server.server_core import ServerCore
from servinglib.testing import wait_until
from servinglib.testing.plugin import TEST_SERVER_CORE_OPTIONS
from tests.server.stream_model import ENDLESS, SPEC, model_of, write_stream_model

SIGNATURES = ["serving_default", "inline_count", "async_count"]


def inputs(n: int, tag: str) -> dict[str, Any]:
    return {"n": np.array([n], np.int32), "tag": np.array([tag.encode()], dtype=object)}


@pytest.fixture
def core(tmp_path: Path) -> Iterator[ServerCore]:
    options = attrs.evolve(TEST_SERVER_CORE_OPTIONS, max_requests_in_flight_per_model=2)
    with ServerCore(write_stream_model(tmp_path), options) as core:
        yield core


@pytest.fixture
def records() -> list[StreamRecord]:
    return []


@pytest.fixture
def plane(core: ServerCore, records: list[StreamRecord]) -> Iterator[DataPlane]:
    plane = DataPlane(core, max_workers=2, on_stream=records.append)
    yield plane
    plane.close()


async def read_all(plane: DataPlane, signature: str, n: int, tag: str) -> list[int]:
    async with plane.open_stream(SPEC, signature, inputs(n, tag)) as stream:
        return [int(part["i"][0]) async for part in stream]


@pytest.mark.parametrize("signature", SIGNATURES)
def test_parts_arrive_in_order_and_the_stream_is_recorded(
    plane: DataPlane, core: ServerCore, records: list[StreamRecord], signature: str
) -> None:
    """Each execution mode streams every part in order; the record counts them, outcome OK."""
    assert asyncio.run(read_all(plane, signature, 5, "a")) == [0, 1, 2, 3, 4]
    [record] = records
    assert (record.model_name, record.version, record.signature_name) == ("stream", 1, signature)
    assert (record.code, record.parts) == (StatusCode.OK, 5)
    assert record.first_part_s is not None
    assert record.first_part_s <= record.duration_s
    with model_of(core) as model:
        assert model.closed == ["a"]


@pytest.mark.parametrize("signature", SIGNATURES)
def test_a_model_error_ends_the_stream_after_the_parts_before_it(
    plane: DataPlane, records: list[StreamRecord], signature: str
) -> None:
    """A generator that raises delivers its parts, then the error (wrapped, with its message)."""

    got: list[int] = []

    async def run() -> None:
        async with plane.open_stream(SPEC, signature, inputs(-2, "e")) as stream:
            async for part in stream:
                got.append(int(part["i"][0]))

    with pytest.raises(Exception, match="failed after 2 parts"):
        asyncio.run(run())
    assert got == [0, 1]
    assert records[0].code is not StatusCode.OK


def test_bad_requests_fail_before_the_stream_opens(plane: DataPlane) -> None:
    """Inputs that do not fit are INVALID_ARGUMENT at open_stream, before any part."""
    with pytest.raises(InvalidArgumentError, match="tag"):
        plane.open_stream(SPEC, None, {"n": np.array([1], np.int32)})


def test_a_streaming_signature_refuses_a_whole_call(plane: DataPlane) -> None:
    """infer on a streaming signature is FAILED_PRECONDITION naming the streaming calls."""
    with pytest.raises(FailedPreconditionError, match="ModelStreamInfer"):
        asyncio.run(plane.infer(SPEC, None, inputs(1, "w")))


def test_a_whole_signature_streams_one_part(plane: DataPlane) -> None:
    """A signature that does not stream gives its outputs as the stream's one part."""

    async def run() -> list[bytes]:
        async with plane.open_stream(SPEC, "whole", inputs(7, "w")) as stream:
            return [part["text_output"][0] async for part in stream]

    assert asyncio.run(run()) == [b"whole"]


@pytest.mark.parametrize("signature", SIGNATURES)
def test_closing_early_closes_the_generator_and_leaves_no_task(
    plane: DataPlane, core: ServerCore, records: list[StreamRecord], signature: str
) -> None:
    """A reader that stops after one part: the generator's finally ran, no task is left."""

    async def run() -> set[asyncio.Task[Any]]:
        async with plane.open_stream(SPEC, signature, inputs(ENDLESS, "c")) as stream:
            await anext(stream)
        return asyncio.all_tasks() - {asyncio.current_task()}  # type: ignore[operator]

    assert asyncio.run(run()) == set()
    with model_of(core) as model:
        assert model.closed == ["c"]
    assert (records[0].code, records[0].parts) == (StatusCode.CANCELLED, 1)


@pytest.mark.parametrize("signature", SIGNATURES)
def test_a_slow_reader_holds_the_generator_back(
    plane: DataPlane, core: ServerCore, signature: str
) -> None:
    """An endless generator is at most the buffer and a batch in hand ahead of its reader."""

    async def run() -> int:
        stream = plane.open_stream(SPEC, signature, inputs(ENDLESS, "s"), buffer_parts=3)
        async with stream:
            for _ in range(10):
                await anext(stream)
            with model_of(core) as model:
                # Wait until the producer is blocked on the full buffer, then look again.
                await asyncio.to_thread(wait_until, lambda: model.produced.get("s", 0) >= 13)
                for _ in range(20):
                    await asyncio.sleep(0.001)
                return int(model.produced["s"])

    # Read, buffered, and a batch in hand (a THREAD generator's pool call makes up to 3).
    assert asyncio.run(run()) <= 10 + 3 + 3


def test_a_stream_counts_as_one_request_in_flight_until_closed(plane: DataPlane) -> None:
    """With a bound of 2, two open streams refuse a third (UNAVAILABLE); closing one frees it."""

    async def run() -> None:
        first = plane.open_stream(SPEC, None, inputs(ENDLESS, "1"))
        second = plane.open_stream(SPEC, None, inputs(ENDLESS, "2"))
        await anext(first)
        with pytest.raises(UnavailableError):
            plane.open_stream(SPEC, None, inputs(1, "3"))
        await first.aclose()
        async with plane.open_stream(SPEC, None, inputs(1, "4")) as third:
            assert [p["i"][0] async for p in third] == [0]
        await second.aclose()

    asyncio.run(run())


@pytest.mark.parametrize("signature", SIGNATURES)
def test_the_deadline_bounds_the_whole_stream(
    plane: DataPlane, core: ServerCore, records: list[StreamRecord], signature: str
) -> None:
    """An endless stream read past its deadline: DEADLINE_EXCEEDED; the generator closes."""

    async def run() -> None:
        deadline = time.monotonic() + 0.2
        async with plane.open_stream(SPEC, signature, inputs(ENDLESS, "d"), deadline=deadline) as s:
            with pytest.raises(DeadlineExceededError):
                async for _ in s:
                    pass

    asyncio.run(run())
    with model_of(core) as model:
        assert model.closed == ["d"]
    assert records[0].code is StatusCode.DEADLINE_EXCEEDED


@pytest.mark.parametrize("signature", SIGNATURES)
def test_cut_off_ends_open_streams_with_the_error(
    plane: DataPlane, core: ServerCore, signature: str
) -> None:
    """At shutdown, cut_off ends a running stream with the error; the generator closes."""

    async def run() -> None:
        async with plane.open_stream(SPEC, signature, inputs(ENDLESS, "cut")) as stream:
            await anext(stream)
            assert plane.open_streams() == 1
            plane.cut_off(UnavailableError("shutting down"))
            with pytest.raises(UnavailableError, match="shutting down"):
                async for _ in stream:
                    pass
        assert plane.open_streams() == 0

    asyncio.run(run())
    with model_of(core) as model:
        assert model.closed == ["cut"]


def part_size(plane: DataPlane) -> int:
    """The bytes one part of the stream model is charged (an int32 and a short string)."""

    async def one() -> int:
        async with plane.open_stream(SPEC, None, inputs(1, "size")) as stream:
            await anext(stream)
            return plane.stream_budget.used

    return asyncio.run(one())


@pytest.fixture
def unbounded_core(tmp_path: Path) -> Iterator[ServerCore]:
    """A core with no bound on requests in flight: the streams' own bounds under test."""
    with ServerCore(write_stream_model(tmp_path), TEST_SERVER_CORE_OPTIONS) as core:
        yield core


@pytest.mark.parametrize("signature", SIGNATURES)
def test_streams_nobody_reads_hold_at_most_the_server_wide_budget(
    unbounded_core: ServerCore, signature: str
) -> None:
    """Four unread endless streams fill the byte budget (but its quarter kept for readers) and
    stop; a stream that is read still streams all its parts meanwhile."""
    probe = DataPlane(unbounded_core, max_workers=2)
    size = part_size(probe)
    probe.close()
    budget = 40 * size  # less than the four streams' buffers of 8 parts and a batch of 8 each
    plane = DataPlane(
        unbounded_core, max_workers=2, streams=StreamLimits(max_buffered_bytes=budget)
    )

    async def run() -> None:
        unread = [plane.open_stream(SPEC, signature, inputs(ENDLESS, f"u{i}")) for i in range(4)]
        for stream in unread:
            await anext(stream)  # started; then never read again
        wait_for_full = asyncio.to_thread(
            wait_until, lambda: not plane.stream_budget.has_room(size)
        )
        await wait_for_full
        assert plane.stream_budget.used <= budget
        with model_of(unbounded_core) as model:
            made = sum(model.produced.get(f"u{i}", 0) for i in range(4))
        # The budget's parts and one part per waiting producer.
        assert made <= 40 + 4
        async with plane.open_stream(SPEC, signature, inputs(20, "read")) as read:
            parts = [int(part["i"][0]) async for part in read]
        assert parts == list(range(20))
        assert plane.stream_budget.used <= budget
        for stream in unread:
            await stream.aclose()
        assert plane.stream_budget.used == 0

    asyncio.run(run())
    plane.close()


def test_a_stream_whose_reader_takes_nothing_ends_after_the_idle_timeout(
    unbounded_core: ServerCore,
) -> None:
    """A full buffer left unread for idle_timeout_s ends the stream: generator closed, bytes back,
    the reader's next read is DEADLINE_EXCEEDED naming the timeout."""
    plane = DataPlane(unbounded_core, max_workers=2, streams=StreamLimits(idle_timeout_s=0.2))

    async def run() -> None:
        async with plane.open_stream(SPEC, None, inputs(ENDLESS, "idle")) as stream:
            await anext(stream)
            with model_of(unbounded_core) as model:
                await asyncio.to_thread(wait_until, lambda: model.closed == ["idle"])
            with pytest.raises(DeadlineExceededError, match=r"read no part for 0\.2 s"):
                await anext(stream)
        assert plane.stream_budget.used == 0

    asyncio.run(run())
    plane.close()


def test_streams_past_the_per_model_bound_are_refused_at_once(unbounded_core: ServerCore) -> None:
    """With two streams of a model open, a third is UNAVAILABLE naming the bound; closing one
    gives its place back."""
    plane = DataPlane(unbounded_core, max_workers=2, streams=StreamLimits(max_streams_per_model=2))

    async def run() -> None:
        first = plane.open_stream(SPEC, None, inputs(ENDLESS, "a"))
        async with plane.open_stream(SPEC, None, inputs(ENDLESS, "b")):
            with pytest.raises(UnavailableError, match="limit of 2 open streams"):
                plane.open_stream(SPEC, None, inputs(1, "c"))
            await first.aclose()
            async with plane.open_stream(SPEC, None, inputs(1, "d")) as stream:
                assert [int(p["i"][0]) async for p in stream] == [0]

    asyncio.run(run())
    assert plane.open_streams() == 0
    plane.close()
