"""Restricted API groups over REST: each group locked and open, through a real server."""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from servinglib.errors import InvalidArgumentError, NotFoundError
from servinglib.server import record_request
from servinglib.server.auth import REST_API_GROUPS, ApiGroup, RestrictedApis
from servinglib.server.observe.metrics import ServerMetrics
from servinglib.server.observe.request_record import RequestRecord
from servinglib.server.observe.tracing import Tracing
from servinglib.server.plane.data_plane import DataPlane
from servinglib.server.rest import RestOptions, RestServer, create_app
from servinglib.server.rest.metrics_endpoint import MetricsEndpoint
from servinglib.server.rest.router import Router
from servinglib.server.server_core import ServerCore
from servinglib.testing import wait_until

TOKEN = "Bearer rest-secret-0123456789"
WRONG = "Bearer wrong-guess-9876543210"
PREDICT = {"instances": [1.0, 2.0]}
INFER = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1.0]}]}

# Requests of each group the session's models answer 200 to, when allowed.
REQUESTS: dict[ApiGroup, list[tuple[str, str, object]]] = {
    ApiGroup.HEALTH: [
        ("GET", "/v2/health/live", None),
        ("GET", "/v2/health/ready", None),
        ("GET", "/v2/models/half_plus_two/ready", None),
        ("GET", "/v1/models/half_plus_two", None),
    ],
    ApiGroup.METADATA: [
        ("GET", "/v2", None),
        ("GET", "/v2/models/half_plus_two", None),
        ("GET", "/v1/models/half_plus_two/metadata", None),
        ("GET", "/v1/models", None),
    ],
    ApiGroup.INFERENCE: [
        ("POST", "/v1/models/half_plus_two:predict", PREDICT),
        ("POST", "/v1/models/half_plus_two/labels/stable:predict", PREDICT),
        ("POST", "/v2/models/py_half_plus_two/infer", INFER),
    ],
    ApiGroup.MODEL_CONFIG: [("GET", "/v2/models/half_plus_two/config", None)],
    ApiGroup.MODEL_REPOSITORY: [("POST", "/v2/repository/index", {})],
    ApiGroup.STATISTICS: [
        ("GET", "/v2/models/stats", None),
        ("GET", "/v2/models/half_plus_two/stats", None),
        ("GET", "/metrics", None),
    ],
}


@contextlib.contextmanager
def serving(
    target: ServerCore | DataPlane,
    restricted: RestrictedApis,
    records: list[RequestRecord] | None = None,
) -> Iterator[str]:
    """The REST app (metrics in front) on 127.0.0.1; yields its URL."""
    core = target.core if isinstance(target, DataPlane) else target
    metrics = ServerMetrics()
    metrics.attach(core)
    observers = [record_request(metrics), *([records.append] if records is not None else [])]

    def observe(record: RequestRecord) -> None:
        for observer in observers:
            observer(record)

    inner = create_app(target, RestOptions(restricted_apis=restricted), on_request=observe)
    app = MetricsEndpoint(inner, metrics, restricted=restricted)
    server = RestServer(app, "127.0.0.1", 0)
    server.start()
    try:
        yield server.url
    finally:
        server.stop()
        inner.close()


def call(
    client: httpx.Client, method: str, path: str, body: object, token: str | None = None
) -> httpx.Response:
    headers = {"Authorization": token} if token is not None else {}
    return client.request(method, path, json=body, headers=headers)


@pytest.mark.parametrize("locked", list(REQUESTS), ids=lambda group: group.value)
def test_each_group_locked_alone(core: ServerCore, locked: ApiGroup) -> None:
    """The locked group answers 401 without the header, 403 with another value, 200 with it;
    every other group stays open (one keep-alive session throughout)."""
    restricted = RestrictedApis.http([f"{locked.value}:authorization={TOKEN}"])
    with serving(core, restricted) as url, httpx.Client(base_url=url) as client:
        for method, path, body in REQUESTS[locked]:
            missing = call(client, method, path, body)
            assert missing.status_code == 401, (path, missing.text)
            assert "'authorization'" in missing.json()["error"]
            assert call(client, method, path, body, WRONG).status_code == 403, path
            assert call(client, method, path, body, TOKEN).status_code == 200, path
        for group, requests in REQUESTS.items():
            for method, path, body in requests if group is not locked else ():
                assert call(client, method, path, body).status_code == 200, path


def test_health_stays_open_when_every_other_group_is_locked(core: ServerCore) -> None:
    """Locking all groups but health leaves probes answering without credentials."""
    others = ",".join(group.value for group in ApiGroup if group is not ApiGroup.HEALTH)
    restricted = RestrictedApis.http([f"{others}:authorization={TOKEN}"])
    with serving(core, restricted) as url, httpx.Client(base_url=url) as client:
        for method, path, body in REQUESTS[ApiGroup.HEALTH]:
            assert call(client, method, path, body).status_code == 200, path
        for group in REQUESTS.keys() - {ApiGroup.HEALTH}:
            for method, path, body in REQUESTS[group]:
                assert call(client, method, path, body).status_code == 401, path


def test_groups_may_need_different_credentials(core: ServerCore) -> None:
    """Two flags: inference by one header, management by another; neither opens the other."""
    restricted = RestrictedApis.http(
        ["inference:x-infer-key=user", "model-repository,model-config:x-admin-key=admin"]
    )
    with serving(core, restricted) as url, httpx.Client(base_url=url) as client:
        predict = "/v1/models/half_plus_two:predict"
        assert client.post(predict, json=PREDICT, headers={"X-Infer-Key": "user"}).is_success
        assert (
            client.post(predict, json=PREDICT, headers={"x-admin-key": "admin"}).status_code == 401
        )
        index = "/v2/repository/index"
        assert client.post(index, headers={"x-admin-key": "admin"}).is_success
        assert client.post(index, headers={"x-admin-key": "user"}).status_code == 403


def test_a_refused_request_body_is_not_read(core: ServerCore) -> None:
    """A refused request is answered before its body counts: a 10 MB upload is 401, not read."""
    restricted = RestrictedApis.http([f"inference:authorization={TOKEN}"])
    with serving(core, restricted) as url, httpx.Client(base_url=url) as client:
        response = client.post("/v1/models/half_plus_two:predict", content=b"x" * (10 << 20))
        assert response.status_code == 401
        assert client.get("/v2/health/live").is_success  # the connection still serves


def test_curl_sends_the_header(core: ServerCore) -> None:
    """curl -H 'Authorization: ...' predicts; curl without it reads 401 (curl-style clients)."""
    restricted = RestrictedApis.http([f"inference:authorization={TOKEN}"])
    with serving(core, restricted) as url:
        predict = [
            "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
            "-d", '{"instances": [1.0]}', f"{url}/v1/models/half_plus_two:predict",
        ]  # fmt: skip

        def status(*extra: str) -> str:
            done = subprocess.run(
                [*predict, *extra], check=False, capture_output=True, text=True, timeout=60
            )
            return done.stdout

        assert status("-H", f"Authorization: {TOKEN}") == "200"
        assert status() == "401"
        assert status("-H", f"Authorization: {WRONG}") == "403"


def test_a_wrong_token_is_never_logged_recorded_or_traced(
    core: ServerCore, caplog: pytest.LogCaptureFixture
) -> None:
    """Refused and accepted requests leave neither credential in logs, records or spans."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    plane = DataPlane(core, tracing=Tracing(provider))
    records: list[RequestRecord] = []
    restricted = RestrictedApis.http([f"inference,statistics:authorization={TOKEN}"])
    try:
        with (
            caplog.at_level(logging.DEBUG),
            serving(plane, restricted, records) as url,
            httpx.Client(base_url=url) as client,
        ):
            for token in (WRONG, TOKEN, None):
                for method, path, body in REQUESTS[ApiGroup.INFERENCE]:
                    call(client, method, path, body, token)
                call(client, "GET", "/metrics", None, token)
    finally:
        plane.close()
        provider.shutdown()
    assert [r.status for r in records].count(403) == len(REQUESTS[ApiGroup.INFERENCE])
    seen = caplog.text + repr(records) + repr([s.to_json() for s in exporter.get_finished_spans()])
    assert exporter.get_finished_spans()  # the accepted requests were traced
    for secret in (TOKEN, WRONG, "rest-secret", "wrong-guess"):
        assert secret not in seen


def test_a_rotated_token_file_takes_effect_on_the_next_request(
    core: ServerCore, tmp_path: Path
) -> None:
    """authorization=@PATH: replacing the file admits the new token and refuses the old one
    on the same keep-alive connection, without a restart."""
    token = tmp_path / "token"
    token.write_text("Bearer first\n")
    restricted = RestrictedApis.http([f"inference:authorization=@{token}"])
    predict = "/v1/models/half_plus_two:predict"
    with serving(core, restricted) as url, httpx.Client(base_url=url) as client:
        assert call(client, "POST", predict, PREDICT, "Bearer first").status_code == 200
        rotated = tmp_path / "token.new"
        rotated.write_text("Bearer second\n")
        os.replace(rotated, token)
        # The file is looked at once a second (RECHECK_INTERVAL_S): wait for the new token.
        wait_until(
            lambda: call(client, "POST", predict, PREDICT, "Bearer second").status_code == 200,
            timeout_s=10,
        )
        assert call(client, "POST", predict, PREDICT, "Bearer first").status_code == 403


def test_cors_preflight_allows_the_credential_header(core: ServerCore) -> None:
    """With CORS on, preflights stay open and allow the restricted groups' headers."""
    restricted = RestrictedApis.http([f"inference:authorization={TOKEN}"])
    options = RestOptions(enable_cors_support=True, restricted_apis=restricted)
    app = create_app(core, options)
    server = RestServer(app, "127.0.0.1", 0)
    with server, httpx.Client(base_url=server.url) as client:
        preflight = client.options("/v1/models/half_plus_two:predict")
        assert preflight.status_code == 204
        allowed = preflight.headers["access-control-allow-headers"]
        assert allowed == "Content-Type, authorization"
    app.close()


class _Api:
    """Stands in for the protocol APIs: matching a path never calls a handler."""

    def __getattr__(self, _name: str) -> object:
        async def handler(_request: object) -> object:
            raise AssertionError("not called")

        return handler


def test_every_route_has_a_group() -> None:
    """Each API name the router gives a route is in the table of groups (none is left open
    by omission)."""
    api: object = _Api()
    router = Router(api, api, api, api)  # type: ignore[arg-type]
    paths = [
        *(path for requests in REQUESTS.values() for _method, path, _body in requests),
        "/v1/models/m:classify",
        "/v1/models/m:regress",
        "/v1/models/m:explain",
        "/v1/models/m/versions/1:predict",
        "/v2/models/m/versions/1/infer",
        "/v2/models/m/generate",
        "/v2/models/m/generate_stream",
        "/v2/repository/models/m/load",
        "/v2/repository/models/m/unload",
        "/v1/models/m/labels/l/custom/any/path",
    ]
    apis = set()
    for method in ("GET", "POST"):
        for path in paths:
            with contextlib.suppress(NotFoundError, InvalidArgumentError):
                apis.add(router.match(method, path).api)
    assert len(apis) == len(REST_API_GROUPS) - 1  # all but the scrape, which is not routed
    assert apis <= REST_API_GROUPS.keys()
