"""Transport-level errors: body limit, broken JSON, overload, deadlines, CORS, unknown paths."""

from __future__ import annotations

import asyncio
import gzip
import zlib
from collections.abc import AsyncIterator, Callable, Iterator

import attrs
import httpx
import numpy as np
import pytest

from servinglib.server.config import ModelConfig, ModelServerConfig
from servinglib.server.model_spec import ModelSpec
from servinglib.server.rest import RequestRecord, RestApp, RestOptions, create_app
from servinglib.server.server_core import ServerCore
from tests.server.rest.conftest import CORE_OPTIONS, Client, write_toy_model


@pytest.fixture(scope="module")
def limited_core(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerCore]:
    """The toy model alone, with at most one request in flight."""
    toy = write_toy_model(tmp_path_factory.mktemp("limited"))
    options = attrs.evolve(CORE_OPTIONS, max_requests_in_flight_per_model=1)
    with ServerCore(ModelServerConfig([ModelConfig.python("toy", toy)]), options) as core:
        yield core


@pytest.fixture
def strict_app(limited_core: ServerCore) -> Iterator[tuple[RestApp, list[RequestRecord]]]:
    """An app with a 1 KiB body limit, a 50 ms timeout and CORS, recording every request."""
    records: list[RequestRecord] = []
    options = RestOptions(
        request_timeout_s=0.05, max_request_body_bytes=1024, enable_cors_support=True
    )
    app = create_app(limited_core, options, on_request=records.append)
    yield app, records
    app.close()


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b'{"instances": [1.0,', "Malformed JSON"),
        (b'{"instances": [1.0]', "Malformed JSON"),
        (b"\xff\xfe{}", "Malformed JSON"),
        (b'{"instances": ["\xff"]}', "Malformed JSON"),
        (b"[" * 5000 + b"]" * 5000, "Malformed JSON"),
        (b'{"instances": [NaN' + b"," * 3, "Malformed JSON"),
        (b"", "empty"),
        (b"[]", "JSON object"),
        (b'{"instances": ' + b"[" * 40 + b"1" + b"]" * 40 + b"}", "nested"),
    ],
)
def test_broken_json_is_400(client: Client, content: bytes, fragment: str) -> None:
    """Truncated, non-UTF-8, deeply nested or non-object bodies are 400s naming the problem."""
    response = client.post("/v1/models/half_plus_two:predict", content=content)
    assert response.status_code == 400, response.text
    assert fragment in response.json()["error"]


def test_oversize_body_is_413(strict_app: tuple[RestApp, list[RequestRecord]]) -> None:
    """A body over max_request_body_bytes is refused with 413, by its length or as it streams."""
    client = Client(strict_app[0])
    response = client.post("/v1/models/toy:predict", content=b"x" * 2048)
    assert response.status_code == 413
    assert "1024" in response.json()["error"]

    async def chunks() -> AsyncIterator[bytes]:
        yield b"[" * 600
        yield b"]" * 600

    streamed = client.post("/v1/models/toy:predict", content=chunks())
    assert streamed.status_code == 413


def test_overload_is_503(strict_app: tuple[RestApp, list[RequestRecord]]) -> None:
    """At the model's in-flight bound a request is refused at once with 503 and a JSON error."""
    app = strict_app[0]
    client = Client(app)
    x = {"x": np.array([1.0], np.float32)}

    async def refused_while_one_waits() -> httpx.Response:
        waiting = asyncio.create_task(app.plane.infer(ModelSpec.latest("toy"), "never", x))
        await asyncio.sleep(0)  # it takes the model's one place in flight
        try:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
                body = {"signature_name": "inline", "inputs": [1.0]}
                return await http.post("/v1/models/toy:predict", json=body)
        finally:
            waiting.cancel()

    response = asyncio.run(refused_while_one_waits())
    assert response.status_code == 503
    assert "in flight" in response.json()["error"]
    after = client.post("/v1/models/toy:predict", json={"signature_name": "inline", "inputs": [1]})
    assert after.status_code == 200


def test_timeout_is_504_for_both_protocols(
    strict_app: tuple[RestApp, list[RequestRecord]],
) -> None:
    """A model call past request_timeout_s answers 504."""
    client = Client(strict_app[0])
    tfs = client.post("/v1/models/toy:predict", json={"signature_name": "never", "inputs": [1]})
    assert tfs.status_code == 504
    assert "Deadline" in tfs.json()["error"]
    v2 = client.post(
        "/v2/models/toy/infer",
        json={
            "inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1]}],
            "parameters": {"signature_name": "never"},
        },
    )
    assert v2.status_code == 504


def test_cors_headers_and_preflight(strict_app: tuple[RestApp, list[RequestRecord]]) -> None:
    """With CORS on, responses allow any origin and OPTIONS preflights succeed."""
    client = Client(strict_app[0])
    preflight = client.request("OPTIONS", "/v1/models/toy:predict", headers={"Origin": "http://a"})
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == "*"
    response = client.get("/v1/models/toy")
    assert response.headers["access-control-allow-methods"] == "POST, GET"


def test_no_cors_headers_by_default(client: Client) -> None:
    """CORS is off unless enabled: no Access-Control headers."""
    assert "access-control-allow-origin" not in client.get("/v2/health/live").headers


def test_each_request_is_recorded_once(strict_app: tuple[RestApp, list[RequestRecord]]) -> None:
    """on_request sees model, API, entrypoint, status and latency of each request."""
    app, records = strict_app
    client = Client(app)
    client.post("/v1/models/toy:predict", json={"signature_name": "inline", "inputs": [1]})
    client.get("/v2/models/toy/ready")
    client.get("/nowhere")
    assert [(r.model_name, r.api, r.entrypoint, r.status) for r in records] == [
        ("toy", "predict", "REST", 200),
        ("toy", "model_ready", "REST", 200),
        ("", "unknown", "REST", 404),
    ]
    assert all(r.latency_s >= 0 for r in records)


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/v1/models/toy:predict", 400),
        ("POST", "/v1/models/toy", 400),
        ("DELETE", "/v1/models/toy", 400),
        ("GET", "/v1/nothing", 400),
        ("POST", "/v2/health/live", 404),
        ("GET", "/v2/models/toy/infer", 404),
        ("PUT", "/v2/models/toy/infer", 404),
        ("GET", "/", 404),
    ],
)
def test_wrong_methods_and_paths(client: Client, method: str, path: str, status: int) -> None:
    """Paths no endpoint serves: TF Serving's 400 "Malformed request" under /v1/, else 404."""
    response = client.request(method, path)
    assert response.status_code == status
    assert response.json()["error"]


def test_request_options_are_validated() -> None:
    """RestOptions refuses non-positive limits and timeouts."""
    with pytest.raises(ValueError, match="request_timeout_s"):
        RestOptions(request_timeout_s=0)
    with pytest.raises(ValueError, match="max_request_body_bytes"):
        RestOptions(max_request_body_bytes=0)
    assert RestOptions(request_timeout_s=None).request_timeout_s is None


@pytest.mark.parametrize(
    ("encoding", "compress"),
    [
        ("gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("gzip, identity", gzip.compress),
        ("deflate, gzip", lambda data: gzip.compress(zlib.compress(data))),
    ],
)
def test_a_compressed_body_is_decoded(
    client: Client, encoding: str, compress: Callable[[bytes], bytes]
) -> None:
    """A body with Content-Encoding gzip or deflate (or both) is answered as the plain one."""
    body = compress(b'{"instances": [1.0, 2.0, 5.0]}')
    response = client.post(
        "/v1/models/half_plus_two:predict", content=body, headers={"content-encoding": encoding}
    )
    assert response.status_code == 200, response.text
    assert response.json() == {"predictions": [3.5, 4.0, 5.5]}


def test_a_body_that_decodes_past_the_limit_is_413(
    strict_app: tuple[RestApp, list[RequestRecord]],
) -> None:
    """A gzip body under the 1 KiB limit that decodes past it is refused with 413, also a bomb
    (512 KiB in half a KiB), which is not decoded whole."""
    client = Client(strict_app[0])
    for size in (2048, 512 << 10):
        bomb = gzip.compress(b" " * size)
        assert len(bomb) < 1024
        response = client.post(
            "/v1/models/toy:predict", content=bomb, headers={"content-encoding": "gzip"}
        )
        assert response.status_code == 413, response.text
        assert "decodes to more than the limit of 1024 bytes" in response.json()["error"]


@pytest.mark.parametrize(
    ("encoding", "body", "status", "fragment"),
    [
        ("br", b"{}", 415, "'br' is not supported"),
        ("gzip", b'{"instances": [1.0]}', 400, "not valid gzip"),
        # mtime=0: the ids are the bodies, the same in every xdist worker whenever collected
        ("gzip", gzip.compress(b'{"x": [1.0]}', mtime=0)[:-6], 400, "not one complete gzip"),
        ("gzip", gzip.compress(b"{}", mtime=0) + b"trailing", 400, "not one complete gzip"),
    ],
)
def test_a_body_its_encoding_does_not_describe_is_refused(
    client: Client, encoding: str, body: bytes, status: int, fragment: str
) -> None:
    """An unknown coding is 415; a body that is not the gzip it claims is 400, naming it."""
    response = client.post(
        "/v1/models/half_plus_two:predict", content=body, headers={"content-encoding": encoding}
    )
    assert response.status_code == status, response.text
    assert fragment in response.json()["error"]
