"""ModelStreamInfer through tritonclient.grpc's stream: parts, ids, errors, final flags, cancel."""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import grpc
import numpy as np
import pytest
import tritonclient.grpc as triton
from grpc_servers import Served, serving
from tritonclient.utils import InferenceServerException

from servinglib.errors import StatusCode
from servinglib.protos import grpc_service_pb2 as v2
from servinglib.server.grpc import stream_infer
from servinglib.server.observe.call_record import StreamRecord
from servinglib.server.plane.data_plane import DataPlane
from servinglib.server.plane.stream_limits import StreamLimits
from servinglib.server.server_core import ServerCore
from servinglib.testing import wait_until
from servinglib.testing.plugin import TEST_SERVER_CORE_OPTIONS
from tests.server.stream_model import ENDLESS, model_of, write_stream_model

Result = tuple[Any, InferenceServerException | None]


@attrs.define
class Server:
    served: Served
    core: ServerCore
    streams: list[StreamRecord]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    streams: list[StreamRecord] = []
    with ServerCore(write_stream_model(tmp_path), TEST_SERVER_CORE_OPTIONS) as core:
        plane = DataPlane(core, max_workers=2, on_stream=streams.append)
        with serving(plane) as served:
            yield Server(served, core, streams)
            # Every stream ends once its client has gone: none is left to cut at the stop.
            wait_until(lambda: plane.open_streams() == 0)
        plane.close()


@pytest.fixture
def client(server: Server) -> Iterator[tuple[Any, queue.Queue[Result]]]:
    """A tritonclient with a started stream; responses (result, error) land in the queue."""
    results: queue.Queue[Result] = queue.Queue()
    client = triton.InferenceServerClient(server.served.address)
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    yield client, results
    client.stop_stream(cancel_requests=True)
    client.close()


def stream_inputs(n: int, tag: str) -> list[triton.InferInput]:
    count = triton.InferInput("n", [1], "INT32")
    count.set_data_from_numpy(np.array([n], np.int32))
    label = triton.InferInput("tag", [1], "BYTES")
    label.set_data_from_numpy(np.array([tag.encode()], dtype=object))
    return [count, label]


def final(result: Any) -> bool:
    return bool(result.get_response().parameters["triton_final_response"].bool_param)


def take(results: queue.Queue[Result], count: int) -> list[Result]:
    return [results.get(timeout=30) for _ in range(count)]


def test_parts_arrive_in_order_with_their_request_ids(
    client: tuple[Any, queue.Queue[Result]],
) -> None:
    """Two concurrent requests: each one's parts in order with its id, then its empty final."""
    stream, results = client
    stream.async_stream_infer(
        "stream", stream_inputs(4, "a"), request_id="a", enable_empty_final_response=True
    )
    stream.async_stream_infer(
        "stream",
        stream_inputs(3, "b"),
        request_id="b",
        enable_empty_final_response=True,
        parameters={"signature_name": "async_count"},
    )
    by_id: dict[str, list[Any]] = {"a": [], "b": []}
    for result, error in take(results, 4 + 1 + 3 + 1):
        assert error is None
        response = result.get_response()
        by_id[response.id].append(None if final(result) else int(result.as_numpy("i")[0]))
        assert response.model_name == "stream"
        assert response.model_version == "1"
    assert by_id == {"a": [0, 1, 2, 3, None], "b": [0, 1, 2, None]}


def test_an_error_mid_stream_arrives_in_band_and_the_stream_stays_open(
    client: tuple[Any, queue.Queue[Result]],
) -> None:
    """A generator failing after 2 parts: the parts, an error; the next request is answered."""
    stream, results = client
    stream.async_stream_infer("stream", stream_inputs(-2, "e"), request_id="e")
    got = take(results, 3)
    assert [int(r.as_numpy("i")[0]) for r, _ in got[:2]] == [0, 1]
    result, error = got[2]
    assert result is None
    assert error is not None
    assert "failed after 2 parts" in error.message()
    stream.async_stream_infer("stream", stream_inputs(1, "next"), request_id="next")
    [(result, error)] = take(results, 1)
    assert error is None
    assert result.get_response().id == "next"


def test_a_bad_request_is_an_error_on_the_stream(
    client: tuple[Any, queue.Queue[Result]],
) -> None:
    """An unknown model: an error response naming it; the stream goes on."""
    stream, results = client
    stream.async_stream_infer("nope", stream_inputs(1, "x"), request_id="x")
    [(result, error)] = take(results, 1)
    assert result is None
    assert error is not None
    assert "nope" in error.message()
    stream.async_stream_infer("stream", stream_inputs(1, "y"), request_id="y")
    assert take(results, 1)[0][1] is None


def test_a_model_that_does_not_stream_answers_once_with_the_final_flag(
    client: tuple[Any, queue.Queue[Result]],
) -> None:
    """python_half_plus_two over the stream: one response, flagged final, with the request id."""
    stream, results = client
    x = triton.InferInput("x", [3], "FP32")
    x.set_data_from_numpy(np.array([1, 2, 3], np.float32))
    stream.async_stream_infer(
        "python_half_plus_two", [x], request_id="h", enable_empty_final_response=True
    )
    [(result, error)] = take(results, 1)
    assert error is None
    assert final(result)
    assert result.get_response().id == "h"
    assert result.as_numpy("y").tolist() == [2.5, 3.0, 3.5]
    stream.async_stream_infer("stream", stream_inputs(1, "z"), request_id="z")
    assert take(results, 1)[0][0].get_response().id == "z"  # nothing else came in between


def test_cancelling_the_stream_closes_the_generator_and_leaves_no_task(server: Server) -> None:
    """A client that cancels mid-stream: the generator's finally runs; no stream task is left."""
    results: queue.Queue[Result] = queue.Queue()
    client = triton.InferenceServerClient(server.served.address)
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    client.async_stream_infer("stream", stream_inputs(ENDLESS, "gone"), request_id="gone")
    assert results.get(timeout=30)[1] is None
    client.stop_stream(cancel_requests=True)
    client.close()
    with model_of(server.core) as model:
        wait_until(lambda: model.closed == ["gone"])
    wait_until(lambda: [record.code for record in server.streams] == [StatusCode.CANCELLED])

    async def ours() -> list[str]:
        return [
            repr(task.get_coro())
            for task in asyncio.all_tasks() - {asyncio.current_task()}  # type: ignore[operator]
            if "stream" in repr(task.get_coro()) or task.get_name().startswith("stream")
        ]

    wait_until(lambda: server.served.loop.run(ours()) == [])
    assert [r.method for r in server.served.records] == ["ModelStreamInfer"]


def test_a_slow_reader_holds_the_generator_back(server: Server) -> None:
    """A client that stops reading: the endless generator stops too, a bounded way ahead."""
    results: queue.Queue[Result] = queue.Queue()
    reading = threading.Event()

    def callback(result: Any, error: Any) -> None:
        results.put((result, error))
        reading.wait(60)  # the client's reader thread stops here

    client = triton.InferenceServerClient(server.served.address)
    client.start_stream(callback=callback)
    client.async_stream_infer("stream", stream_inputs(ENDLESS, "slow"), request_id="slow")
    with model_of(server.core) as model:
        samples: list[int] = []

        def settled() -> bool:
            samples.append(model.produced.get("slow", 0))
            return len(samples) > 200 and samples[-1] == samples[-200] > 0

        wait_until(settled, timeout_s=60)
        produced = samples[-1]
    reading.set()
    client.stop_stream(cancel_requests=True)
    client.close()
    with model_of(server.core) as model:
        wait_until(lambda: model.closed == ["slow"])  # the generator blocked on a full buffer
    # Bounded: the plane's buffer, the handler's responses ahead, and what gRPC's flow-control
    # windows hold (they grow with the connection's measured bandwidth, to a few MiB).
    assert produced < 100_000


def test_the_model_config_says_the_model_is_decoupled(server: Server) -> None:
    """tritonclient's get_model_config sees a streaming model as decoupled, as Triton's."""
    client = triton.InferenceServerClient(server.served.address)
    try:
        assert client.get_model_config("stream").config.model_transaction_policy.decoupled
        plain = client.get_model_config("python_half_plus_two").config
        assert not plain.model_transaction_policy.decoupled
    finally:
        client.close()


def test_requests_past_the_limit_wait_for_earlier_ones(
    client: tuple[Any, queue.Queue[Result]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With one request at once, a stream's second request is answered after the first ends."""
    monkeypatch.setattr(stream_infer, "REQUESTS_AT_ONCE", 1)
    stream, results = client
    stream.async_stream_infer("stream", stream_inputs(3, "a"), request_id="a")
    stream.async_stream_infer("stream", stream_inputs(3, "b"), request_id="b")
    got = [(r.get_response().id, int(r.as_numpy("i")[0])) for r, _ in take(results, 6)]
    assert got == [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1), ("b", 2)]


def open_endless(channel: grpc.Channel, tag: str) -> Any:
    """A ModelStreamInfer call with one endless request, its first response read."""
    call = channel.stream_stream(
        "/inference.GRPCInferenceService/ModelStreamInfer",
        request_serializer=v2.ModelInferRequest.SerializeToString,
        response_deserializer=v2.ModelStreamInferResponse.FromString,
    )
    request = v2.ModelInferRequest(model_name="stream", id=tag)
    n = request.inputs.add(name="n", datatype="INT32", shape=[1])
    n.contents.int_contents.append(ENDLESS)
    label = request.inputs.add(name="tag", datatype="BYTES", shape=[1])
    label.contents.bytes_contents.append(tag.encode())
    responses = call(iter([request]))
    first = next(responses)
    return responses, first


def test_streams_past_the_per_model_bound_are_refused_and_threads_return(tmp_path: Path) -> None:
    """On the synchronous server, with 4 streams of the model open a fifth request is answered
    UNAVAILABLE's message naming the bound; once the clients cancel, the threads return to what
    they were."""
    with ServerCore(write_stream_model(tmp_path), TEST_SERVER_CORE_OPTIONS) as core:
        plane = DataPlane(core, max_workers=2, streams=StreamLimits(max_streams_per_model=4))
        with serving(plane, server="sync") as served:
            channel = grpc.insecure_channel(served.address)

            def round_of_streams() -> None:
                calls = [open_endless(channel, f"s{i}") for i in range(4)]
                assert all(not first.error_message for _call, first in calls)
                _refused, first = open_endless(channel, "refused")
                assert "limit of 4 open streams" in first.error_message
                for call, _first in [*calls, (_refused, first)]:
                    call.cancel()
                wait_until(lambda: plane.open_streams() == 0)

            round_of_streams()  # the server's worker pool grows to what the streams need
            baseline = threading.active_count()
            round_of_streams()
            wait_until(lambda: threading.active_count() <= baseline)
            channel.close()
        plane.close()


def stream_loop_threads() -> list[threading.Thread]:
    """The running threads of synchronous servers' stream loops."""
    return [thread for thread in threading.enumerate() if thread.name == "servinglib-streams"]


def test_streams_on_the_synchronous_server_share_one_event_loop(tmp_path: Path) -> None:
    """Streams open at once on the synchronous server run on one helper loop thread, which ends
    when the server stops."""
    with ServerCore(write_stream_model(tmp_path), TEST_SERVER_CORE_OPTIONS) as core:
        plane = DataPlane(core, max_workers=2)
        with serving(plane, server="sync") as served:
            channel = grpc.insecure_channel(served.address)
            calls = [open_endless(channel, f"s{i}") for i in range(4)]
            assert all(not first.error_message for _call, first in calls)
            assert len(stream_loop_threads()) == 1
            for call, _first in calls:
                call.cancel()
            wait_until(lambda: plane.open_streams() == 0)
            channel.close()
        wait_until(lambda: not stream_loop_threads())
        plane.close()


def test_a_closed_stream_loop_runs_until_its_last_stream_has_left() -> None:
    """close() while a stream is in: the loop keeps running for it, and stops once it leaves."""
    streams = stream_infer.StreamLoop()
    loop = streams.enter()
    streams.close()
    assert asyncio.run_coroutine_threadsafe(asyncio.sleep(0, "on"), loop).result(10) == "on"
    streams.leave()
    wait_until(loop.is_closed)
