"""Custom HTTP endpoints of a Python model, over a real REST server on 127.0.0.1."""

from __future__ import annotations

import contextlib
import json
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import attrs
import httpx
import pytest

from servinglib.core.servable_state import ManagerState
from servinglib.server.auth import RestrictedApis
from servinglib.server.config import ModelConfig, ModelServerConfig
from servinglib.server.observe.request_record import RequestRecord
from servinglib.server.rest import RestOptions, create_app
from servinglib.server.server_core import ServerCore
from servinglib.sources.version_policy import ServableVersionPolicy
from servinglib.testing import wait_until
from tests.server.rest.conftest import CORE_OPTIONS, served_app

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
TOKEN = "Bearer custom-secret-0123456789"
BODY_LIMIT = 64 * 1024
TIMEOUT_S = 0.5

MODEL = textwrap.dedent(
    """
    import json
    import threading

    from servinglib.http_handlers import HttpResponse
    from servinglib.loaders import PythonModel, http_handler

    VERSION = {version}


    class Model(PythonModel):
        def load(self, path):
            self.never = threading.Event()

        @http_handler(path="/thumbnail", methods=["POST"])
        def thumbnail(self, request):
            assert request.header("content-type") == "image/jpeg"
            png = b"\\x89PNG\\r\\n\\x1a\\n" + bytes(reversed(request.body))
            headers = {{"Content-Type": "image/png", "X-Version": str(VERSION)}}
            return HttpResponse(200, headers, png)

        @http_handler(path="/echo", methods=["GET", "POST"])
        def echo(self, request):
            seen = {{
                "version": VERSION,
                "method": request.method,
                "path": request.path,
                "query": request.query_params,
                "greeting": request.header("x-greeting"),
                "authorization": request.header("authorization"),
                "body": request.body.decode(),
            }}
            body = json.dumps(seen).encode()
            return HttpResponse(201, [("content-type", "application/json")], body)

        @http_handler(path="/count", methods=["GET"], streaming=True)
        def count(self, request):
            n = int(request.query_params.get("n", "3"))
            chunks = (f"{{i}}\\n".encode() for i in range(n))
            return HttpResponse(200, {{"content-type": "text/plain"}}, chunks)

        @http_handler(path="/boom")
        def boom(self, request):
            raise ValueError("the handler broke")

        @http_handler(path="/stuck", methods=["GET"])
        def stuck(self, request):
            self.never.wait(2.0)
            return HttpResponse(200)
    """
)


PROCESS_MODEL = textwrap.dedent(
    """
    from servinglib.http_handlers import HttpResponse
    from servinglib.loaders import PythonModel, http_handler


    class Model(PythonModel):
        @http_handler(path="/thumbnail")
        def thumbnail(self, request):
            png = b"\\x89PNG\\r\\n\\x1a\\n" + request.body[::-1]
            return HttpResponse(200, {"content-type": "image/png"}, png)
    """
)


@pytest.fixture(scope="module")
def core(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerCore]:
    """``pics``, versions 1 and 2 (labels stable → 1, canary → 2), each declaring handlers."""
    base = tmp_path_factory.mktemp("custom_http") / "pics"
    for version in (1, 2):
        (base / str(version)).mkdir(parents=True)
        Path(base / str(version) / "model.py").write_text(MODEL.format(version=version))
    model = ModelConfig(
        "pics",
        base,
        "python",
        ServableVersionPolicy.all(),
        version_labels={"stable": 1, "canary": 2},
    )
    options = attrs.evolve(CORE_OPTIONS, allow_version_labels_for_unavailable_models=True)
    with ServerCore(ModelServerConfig([model]), options) as core:
        wait_until(
            lambda: (
                len(core.model_status("pics").versions) == 2
                and all(
                    v.state is ManagerState.AVAILABLE for v in core.model_status("pics").versions
                )
            ),
            60.0,
        )
        yield core


@contextlib.contextmanager
def serving(core: ServerCore, options: RestOptions, records: list[RequestRecord]) -> Iterator[str]:
    """The REST server over ``core`` on 127.0.0.1; yields its URL."""
    with served_app(create_app(core, options, on_request=records.append)) as url:
        yield url


@pytest.fixture(scope="module")
def records() -> list[RequestRecord]:
    """The request records of the open server."""
    return []


@pytest.fixture(scope="module")
def url(core: ServerCore, records: list[RequestRecord]) -> Iterator[str]:
    """An open server with a 64 KiB body limit and a 0.5 s deadline."""
    options = RestOptions(max_request_body_bytes=BODY_LIMIT, request_timeout_s=TIMEOUT_S)
    with serving(core, options, records) as url:
        yield url


@pytest.fixture
def client(url: str) -> Iterator[httpx.Client]:
    """A keep-alive session with the open server."""
    with httpx.Client(base_url=url, timeout=10.0) as client:
        yield client


def test_raw_image_bytes_in_png_bytes_out(client: httpx.Client) -> None:
    """A JPEG body reaches the handler as bytes; its PNG bytes and headers come back as sent."""
    jpeg = bytes(range(256)) * 40  # any bytes: NULs, CR/LF, invalid UTF-8 included
    for _ in range(3):  # one keep-alive connection throughout
        answer = client.post(
            "/v1/models/pics/custom/thumbnail",
            content=jpeg,
            headers={"content-type": "image/jpeg"},
        )
        assert answer.status_code == 200, answer.text
        assert answer.headers["content-type"] == "image/png"
        assert answer.content == PNG_SIGNATURE + jpeg[::-1]
        assert answer.headers["x-version"] == "2"  # the latest version


def test_curl_uploads_an_image(url: str, tmp_path: Path) -> None:
    """curl's ``--data-binary @file`` upload gets the PNG back byte for byte."""
    image = tmp_path / "in.jpg"
    image.write_bytes(b"\xff\xd8\xff\xe0" + bytes(range(256)) * 8)
    out = tmp_path / "out.png"
    done = subprocess.run(
        [
            "curl",
            "-sS",
            "-o",
            str(out),
            "-w",
            "%{http_code} %{content_type}",
            "-H",
            "Content-Type: image/jpeg",
            "--data-binary",
            f"@{image}",
            f"{url}/v1/models/pics/versions/1/custom/thumbnail",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert done.stdout == "200 image/png"
    assert out.read_bytes() == PNG_SIGNATURE + image.read_bytes()[::-1]


def test_the_handler_sees_method_path_query_and_headers(client: httpx.Client) -> None:
    """The handler gets the method, the path below /custom, the query and the headers."""
    answer = client.post(
        "/v1/models/pics/custom/echo/a%20b/c?x=1&y=two%20words&x=3",
        content=b"hello",
        headers={"X-Greeting": "bonjour", "content-type": "text/plain"},
    )
    assert answer.status_code == 201
    assert answer.headers["content-type"] == "application/json"
    seen = answer.json()
    assert seen["method"] == "POST"
    assert seen["path"] == "/echo/a b/c"
    assert seen["query"] == {"x": "3", "y": "two words"}
    assert seen["greeting"] == "bonjour"
    assert seen["body"] == "hello"


def test_a_version_label_and_a_version_choose_the_handler(client: httpx.Client) -> None:
    """``/labels/stable`` and ``/versions/2`` reach those versions' handlers."""
    stable = client.get("/v1/models/pics/labels/stable/custom/echo")
    assert stable.status_code == 201
    assert stable.json()["version"] == 1
    second = client.get("/v1/models/pics/versions/2/custom/echo")
    assert second.json()["version"] == 2
    unknown = client.get("/v1/models/pics/labels/nope/custom/echo")
    assert unknown.status_code == 400  # as :predict answers an unknown label


def test_a_streaming_handler_sends_chunks(client: httpx.Client) -> None:
    """A streaming handler's chunks arrive in order as one chunked body."""
    with client.stream("GET", "/v1/models/pics/custom/count?n=50") as answer:
        assert answer.status_code == 200
        assert answer.headers["content-type"] == "text/plain"
        assert "content-length" not in answer.headers
        body = b"".join(answer.iter_bytes())
    assert body == b"".join(f"{i}\n".encode() for i in range(50))


def test_a_raising_handler_is_a_500_with_the_request_id(client: httpx.Client) -> None:
    """A handler's exception is a JSON 500 naming no traceback, with the request's id."""
    answer = client.post("/v1/models/pics/custom/boom", headers={"x-request-id": "req-77"})
    assert answer.status_code == 500
    assert answer.headers["x-request-id"] == "req-77"
    assert "Traceback" not in answer.text
    assert 'File "' not in answer.text
    assert "the handler broke" in answer.json()["error"]


def test_unknown_path_is_404_and_other_method_405(client: httpx.Client) -> None:
    """A path no handler holds is a 404; a method the handler does not take a 405 with Allow."""
    assert client.get("/v1/models/pics/custom/nowhere").status_code == 404
    assert client.get("/v1/models/pics/custom/thumbnailx").status_code == 404
    wrong = client.put("/v1/models/pics/custom/echo")
    assert wrong.status_code == 405
    assert wrong.headers["allow"] == "GET, POST"


def test_a_body_over_the_limit_is_413(client: httpx.Client) -> None:
    """A body larger than max_request_body_bytes is refused with 413 before the handler."""
    answer = client.post(
        "/v1/models/pics/custom/thumbnail",
        content=b"x" * (BODY_LIMIT + 1),
        headers={"content-type": "image/jpeg"},
    )
    assert answer.status_code == 413


def test_the_deadline_bounds_a_handler(client: httpx.Client) -> None:
    """A handler running past ``request_timeout_s`` is answered 504 at the deadline."""
    answer = client.get("/v1/models/pics/custom/stuck")
    assert answer.status_code == 504
    assert answer.elapsed.total_seconds() < 1.9


def test_calls_are_recorded_and_counted(client: httpx.Client, records: list[RequestRecord]) -> None:
    """A custom call is a ``custom`` request record and counts in the model's statistics."""
    before = _successes(client)
    client.get("/v1/models/pics/custom/echo")
    assert _successes(client) == before + 1
    assert any(r.api == "custom" and r.model_name == "pics" for r in records)


def _successes(client: httpx.Client) -> int:
    stats = client.get("/v2/models/pics/versions/2/stats").json()["model_stats"][0]
    count: int = stats["inference_stats"]["success"]["count"]
    return count


def test_the_inference_group_locks_custom_endpoints(core: ServerCore) -> None:
    """Locked behind ``inference``: 401 without the credential, which the handler never sees."""
    restricted = RestrictedApis.http([f"inference:authorization={TOKEN}"])
    with (
        serving(core, RestOptions(restricted_apis=restricted), []) as url,
        httpx.Client(base_url=url) as client,
    ):
        path = "/v1/models/pics/custom/echo"
        assert client.get(path).status_code == 401
        assert client.get(path, headers={"authorization": "Bearer wrong"}).status_code == 403
        allowed = client.get(path, headers={"authorization": TOKEN})
        assert allowed.status_code == 201
        assert allowed.json()["authorization"] is None
        assert json.dumps(allowed.json()).find("custom-secret") == -1


def test_hostile_paths_reach_the_handler_as_text_or_find_none(client: httpx.Client) -> None:
    """``..``, NUL and CR/LF in the path are only text to the handler; 10,000 distinct paths
    are answered alike (the router's cache of paths stays bounded)."""
    seen = client.get("/v1/models/pics/custom/echo/..%2F..%2Fetc%00%0d%0aX-Evil:%201").json()
    assert seen["path"] == "/echo/../../etc\x00\r\nX-Evil: 1"
    assert client.get("/v1/models/pics/custom/..%2Fecho").status_code == 404
    for i in range(10_000):
        assert client.get(f"/v1/models/pics/custom/echo/{i}").status_code == 201


def test_a_handler_runs_in_a_model_process(tmp_path: Path) -> None:
    """With ``model_process`` the handler's request and response cross to its process whole
    (a streaming handler cannot run there, as no streaming signature can)."""
    base = tmp_path / "pics"
    (base / "1").mkdir(parents=True)
    (base / "1" / "model.py").write_text(PROCESS_MODEL)
    python = attrs.evolve(CORE_OPTIONS.platform_configs["python"], model_process=True)
    options = attrs.evolve(CORE_OPTIONS, platform_configs={"python": python})
    config = ModelServerConfig([ModelConfig("pics", base, "python")])
    with (
        ServerCore(config, options) as core,
        serving(core, RestOptions(), []) as url,
        httpx.Client(base_url=url) as client,
    ):
        answer = client.post(
            "/v1/models/pics/custom/thumbnail",
            content=b"\x00\xffjpeg",
            headers={"content-type": "image/jpeg"},
        )
        assert answer.status_code == 200, answer.text
        assert answer.content == PNG_SIGNATURE + b"gepj\xff\x00"
