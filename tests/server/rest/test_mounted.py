"""The REST app mounted under a prefix in real Starlette and FastAPI apps, served by uvicorn."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

from servinglib.server import record_request
from servinglib.server.observe.metrics import ServerMetrics
from servinglib.server.rest import RestServer, create_app, create_server
from servinglib.server.rest.metrics_endpoint import MetricsEndpoint
from servinglib.server.rest.router import below_root
from servinglib.server.server_core import ServerCore

HostFactory = Callable[[Any], Any]


async def _hello(_request: Request) -> PlainTextResponse:
    return PlainTextResponse("the host's own route")


def starlette_host(rest: Any) -> Starlette:
    """A Starlette app with its own route and the REST app mounted at /serving."""
    return Starlette(routes=[Route("/hello", _hello), Mount("/serving", app=rest)])


def fastapi_host(rest: Any) -> FastAPI:
    """A FastAPI app with its own route and the REST app mounted at /serving."""
    api = FastAPI()
    api.add_api_route("/hello", _hello)
    api.mount("/serving", rest)
    return api


def nested_host(rest: Any) -> Starlette:
    """A Starlette app mounting the REST app at /serving inside a mount at /outer."""
    return Starlette(routes=[Mount("/outer", routes=[Mount("/serving", app=rest)])])


def encoded_host(rest: Any) -> Starlette:
    """A Starlette app mounting the REST app at a prefix clients send percent-encoded."""
    return Starlette(routes=[Mount("/my models", app=rest)])


HOSTS: dict[str, tuple[HostFactory, str]] = {
    "starlette": (starlette_host, "/serving"),
    "fastapi": (fastapi_host, "/serving"),
    "nested": (nested_host, "/outer/serving"),
    "encoded": (encoded_host, "/my%20models"),
}


@pytest.fixture(params=sorted(HOSTS))
def mounted(request: pytest.FixtureRequest, core: ServerCore) -> Iterator[httpx.Client]:
    """A client of the session's REST app (with metrics) mounted in a host app, over TCP."""
    factory, prefix = HOSTS[request.param]
    metrics = ServerMetrics()
    metrics.attach(core)
    rest = create_app(core, on_request=record_request(metrics))
    server, _ = create_server(factory(MetricsEndpoint(rest, metrics)))
    server.start()
    try:
        with httpx.Client(base_url=server.url + prefix, timeout=30.0) as client:
            yield client
    finally:
        server.stop()
        rest.close()


def check_every_route_family(client: httpx.Client) -> None:
    """TF Serving status, metadata, predict; V2 server, ready, metadata, infer; metrics."""
    status = client.get("/v1/models/half_plus_two")
    assert status.status_code == 200, status.text
    assert {s["version"] for s in status.json()["model_version_status"]} == {"1", "2"}
    metadata = client.get("/v1/models/half_plus_two/versions/1/metadata")
    assert metadata.json()["model_spec"]["version"] == "1"
    predict = client.post("/v1/models/half_plus_two/labels/stable:predict", json={"inputs": [1.0]})
    assert predict.json() == {"outputs": [3.5]}
    assert client.get("/v1/models").status_code == 200
    assert client.get("/v2").json()["name"] == "servinglib"
    assert client.get("/v2/health/live").status_code == 200
    assert client.get("/v2/health/ready").status_code == 200
    assert client.get("/v2/models/py_half_plus_two/ready").status_code == 200
    assert client.get("/v2/models/py_half_plus_two").json()["name"] == "py_half_plus_two"
    infer = client.post(
        "/v2/models/py_half_plus_two/infer",
        json={"inputs": [{"name": "x", "datatype": "FP32", "shape": [2], "data": [1.0, 2.0]}]},
    )
    assert infer.status_code == 200, infer.text
    assert infer.json()["outputs"][0]["data"] == [2.5, 3.0]
    missing = client.get("/v2/models/nope/ready")
    assert missing.status_code == 404
    assert "nope" in missing.json()["error"]
    scrape = client.get("/monitoring/prometheus/metrics")
    assert scrape.status_code == 200
    counts = {
        (sample.labels["model_name"], sample.labels["status"]): sample.value
        for family in text_string_to_metric_families(scrape.text)
        for sample in family.samples
        if sample.name == ":tensorflow:serving:request_count_total"
    }
    assert counts[("half_plus_two", "OK")] == 3
    assert counts[("py_half_plus_two", "OK")] == 3
    assert client.head("/metrics").status_code == 200


def test_every_route_family_answers_under_the_mount(mounted: httpx.Client) -> None:
    """Mounted under a prefix, every endpoint answers at prefix + its usual path."""
    check_every_route_family(mounted)


def test_host_routes_and_paths_outside_the_mount_stay_the_hosts(core: ServerCore) -> None:
    """The host's own route answers; the REST paths without the prefix are the host's 404."""
    rest = create_app(core)
    server, _ = create_server(fastapi_host(rest))
    server.start()
    try:
        with httpx.Client(base_url=server.url, timeout=30.0) as client:
            assert client.get("/hello").text == "the host's own route"
            outside = client.post("/v1/models/half_plus_two:predict", json={"inputs": [1.0]})
            assert outside.status_code == 404
            assert outside.json() == {"detail": "Not Found"}  # FastAPI's, not the REST app's
            inside = client.post("/serving/v1/models/half_plus_two:predict", json={"inputs": [1.0]})
            assert inside.json() == {"outputs": [3.5]}
    finally:
        server.stop()
        rest.close()


def test_the_unmounted_app_is_unchanged(core: ServerCore) -> None:
    """Served directly, every route family answers at its usual path, and no prefix is taken."""
    metrics = ServerMetrics()
    metrics.attach(core)
    rest = create_app(core, on_request=record_request(metrics))
    server: RestServer
    server, _ = create_server(MetricsEndpoint(rest, metrics))
    server.start()
    try:
        with httpx.Client(base_url=server.url, timeout=30.0) as client:
            check_every_route_family(client)
            prefixed = client.post(
                "/serving/v1/models/half_plus_two:predict", json={"inputs": [1.0]}
            )
            assert prefixed.status_code == 404
            assert prefixed.json() == {
                "error": "Not found: POST /serving/v1/models/half_plus_two:predict"
            }
    finally:
        server.stop()
        rest.close()


@pytest.mark.parametrize(
    ("path", "root_path", "below"),
    [
        ("/serving/v1/models/m", "/serving", "/v1/models/m"),
        ("/serving", "/serving", "/"),
        ("/serving/", "/serving/", "/"),
        ("/my%20models/v2/models/a%2Fb", "/my models", "/v2/models/a%2Fb"),
        ("/%C3%A9t%C3%A9/v2", "/été", "/v2"),
        ("/v1/models/m", "/serving", "/v1/models/m"),  # the server took the prefix off already
        ("/servingx/v1/models/m", "/serving", "/servingx/v1/models/m"),  # not below the mount
        ("/v1/models/m", "", "/v1/models/m"),
        ("/v1/models/m", "/", "/v1/models/m"),
    ],
)
def test_below_root(path: str, root_path: str, below: str) -> None:
    """The path below the mount point, also when the raw path spells the prefix encoded."""
    assert below_root(path, root_path) == below
