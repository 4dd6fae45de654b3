"""The generate extension over uvicorn: generate, generate_stream's events, errors, disconnects."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest

from servinglib.errors import StatusCode
from servinglib.server.observe.call_record import StreamRecord
from servinglib.server.observe.request_record import RequestRecord
from servinglib.server.plane.data_plane import DataPlane
from servinglib.server.rest import RestOptions, RestServer, create_app
from servinglib.server.server_core import ServerCore
from servinglib.testing import wait_until
from servinglib.testing.plugin import TEST_SERVER_CORE_OPTIONS
from tests.server.stream_model import ENDLESS, model_of, write_stream_model


@attrs.define
class Served:
    url: str
    core: ServerCore
    streams: list[StreamRecord]
    requests: list[RequestRecord]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    streams: list[StreamRecord] = []
    requests: list[RequestRecord] = []
    with ServerCore(write_stream_model(tmp_path), TEST_SERVER_CORE_OPTIONS) as core:
        plane = DataPlane(core, max_workers=2, on_stream=streams.append)
        app = create_app(plane, on_request=requests.append)
        with RestServer(app) as server:
            yield Served(server.url, core, streams, requests)
        plane.close()


def events(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    """Server-sent events' data, decoded as JSON: a plain line reader."""
    for line in lines:
        if line.startswith("data: "):
            yield json.loads(line[len("data: ") :])


def test_generate_stream_sends_one_event_per_part(served: Served) -> None:
    """Three parts: three data events (outputs by name, one element as its value), status 200."""
    body = {"n": 3, "tag": "s"}
    with httpx.stream("POST", f"{served.url}/v2/models/stream/generate_stream", json=body) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        got = list(events(r.iter_lines()))
    assert got == [
        {"model_name": "stream", "model_version": "1", "i": k, "text_output": f"t{k} "}
        for k in range(3)
    ]
    wait_until(lambda: len(served.requests) == 1)  # recorded once the response has ended
    assert [(s.code, s.parts) for s in served.streams] == [(StatusCode.OK, 3)]
    assert [(q.api, q.code) for q in served.requests] == [("generate_stream", StatusCode.OK)]


def test_an_error_mid_stream_is_an_error_event(served: Served) -> None:
    """A generator failing after two parts: two events, then {"error": ...} ends the stream."""
    body = {"n": -2, "tag": "e", "parameters": {"signature_name": "async_count"}}
    url = f"{served.url}/v2/models/stream/versions/1/generate_stream"
    with httpx.stream("POST", url, json=body) as r:
        got = list(events(r.iter_lines()))
    assert [e.get("i") for e in got[:2]] == [0, 1]
    assert "failed after 2 parts" in got[2]["error"]
    assert len(got) == 3
    wait_until(lambda: len(served.requests) == 1)  # recorded once the response has ended
    assert served.requests[0].code is not StatusCode.OK


def test_a_request_failing_before_the_stream_is_a_json_error(served: Served) -> None:
    """A missing input: 400 with a JSON error naming it, before any event."""
    r = httpx.post(f"{served.url}/v2/models/stream/generate_stream", json={"n": 1})
    assert r.status_code == 400
    assert r.headers["content-type"] == "application/json"
    assert "tag" in r.json()["error"]
    assert httpx.post(f"{served.url}/v2/models/nope/generate", json={}).status_code == 404


def test_generate_joins_a_streams_parts(served: Served) -> None:
    """generate on a streaming signature: one object, text concatenated, numbers joined."""
    r = httpx.post(f"{served.url}/v2/models/stream/generate", json={"n": 3, "tag": "j"})
    assert r.status_code == 200
    assert r.json() == {
        "model_name": "stream",
        "model_version": "1",
        "i": [0, 1, 2],
        "text_output": "t0 t1 t2 ",
    }


def test_a_model_that_does_not_stream_answers_both(served: Served) -> None:
    """python_half_plus_two: generate gives its outputs; generate_stream one event of them."""
    url = f"{served.url}/v2/models/python_half_plus_two"
    r = httpx.post(f"{url}/generate", json={"x": [1.0, 2.0]})
    assert r.json() == {"model_name": "python_half_plus_two", "model_version": "1", "y": [2.5, 3.0]}
    with httpx.stream("POST", f"{url}/generate_stream", json={"x": 4.0}) as streamed:
        assert list(events(streamed.iter_lines())) == [
            {"model_name": "python_half_plus_two", "model_version": "1", "y": 4.0}
        ]


def test_a_client_that_disconnects_closes_the_generator(served: Served) -> None:
    """Leaving an endless stream after one event: the generator's finally runs, the stream ends."""
    url = f"{served.url}/v2/models/stream/generate_stream"
    with httpx.stream("POST", url, json={"n": ENDLESS, "tag": "gone"}) as r:
        next(events(r.iter_lines()))
    with model_of(served.core) as model:
        wait_until(lambda: model.closed == ["gone"])
    wait_until(lambda: [s.code for s in served.streams] == [StatusCode.CANCELLED])
    wait_until(lambda: [q.code for q in served.requests] == [StatusCode.CANCELLED])


def test_a_slow_reader_holds_the_generator_back(served: Served) -> None:
    """A client that stops reading: the endless generator stops too, a bounded way ahead."""
    url = f"{served.url}/v2/models/stream/generate_stream"
    with httpx.stream("POST", url, json={"n": ENDLESS, "tag": "slow"}) as r:
        next(events(r.iter_lines()))
        with model_of(served.core) as model:
            samples: list[int] = []

            def settled() -> bool:
                samples.append(model.produced.get("slow", 0))
                return len(samples) > 200 and samples[-1] == samples[-200]

            wait_until(settled, timeout_s=60)
    # Bounded by the plane's buffer and the sockets' buffers (a few MiB of ~100-byte events).
    assert samples[-1] < 100_000
    with model_of(served.core) as model:
        wait_until(lambda: model.closed == ["slow"])


def test_the_rest_timeout_bounds_the_whole_stream(tmp_path: Path) -> None:
    """An endless stream past RestOptions.request_timeout_s ends with a deadline error event."""
    with ServerCore(write_stream_model(tmp_path), TEST_SERVER_CORE_OPTIONS) as core:
        app = create_app(core, RestOptions(request_timeout_s=0.3))
        with RestServer(app) as server:
            url = f"{server.url}/v2/models/stream/generate_stream"
            with httpx.stream("POST", url, json={"n": ENDLESS, "tag": "late"}) as r:
                last = [e for e in events(r.iter_lines()) if "error" in e]
        app.close()
        assert "Deadline exceeded" in last[0]["error"]
        with model_of(core) as model:
            assert model.closed == ["late"]


def test_the_model_config_says_whether_the_model_streams(served: Served) -> None:
    """A streaming default signature is a decoupled model in Triton's config; others are not."""
    config = httpx.get(f"{served.url}/v2/models/stream/config").json()
    assert config["model_transaction_policy"] == {"decoupled": True}
    other = httpx.get(f"{served.url}/v2/models/python_half_plus_two/config").json()
    assert other["model_transaction_policy"] == {"decoupled": False}


@pytest.mark.parametrize("signature", ["serving_default", "async_count"])
def test_concurrent_streams_each_get_their_parts_in_order(served: Served, signature: str) -> None:
    """16 clients streaming at once: each gets its 50 parts, in order."""

    async def one(client: httpx.AsyncClient, tag: str) -> list[int]:
        body = {"n": 50, "tag": tag, "parameters": {"signature_name": signature}}
        url = f"{served.url}/v2/models/stream/generate_stream"
        async with client.stream("POST", url, json=body) as response:
            lines = [line async for line in response.aiter_lines()]
        return [event["i"] for event in events(iter(lines))]

    async def run() -> list[list[int]]:
        async with httpx.AsyncClient(timeout=60) as client:
            return await asyncio.gather(*(one(client, f"c{k}") for k in range(16)))

    assert asyncio.run(run()) == [list(range(50))] * 16


def test_a_whole_call_of_a_streaming_signature_is_a_clear_400(served: Served) -> None:
    """TF Serving predict and V2 infer on a streaming signature: 400 naming the streaming calls."""
    predict = httpx.post(
        f"{served.url}/v1/models/stream:predict", json={"inputs": {"n": [1], "tag": ["a"]}}
    )
    assert predict.status_code == 400
    assert "generate_stream" in predict.json()["error"]
    infer = httpx.post(
        f"{served.url}/v2/models/stream/infer",
        json={
            "inputs": [
                {"name": "n", "shape": [1], "datatype": "INT32", "data": [1]},
                {"name": "tag", "shape": [1], "datatype": "BYTES", "data": ["a"]},
            ]
        },
    )
    assert infer.status_code == 400
    assert "ModelStreamInfer" in infer.json()["error"]
