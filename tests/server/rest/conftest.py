"""Fixtures of the REST tests: one ServerCore per session serving the example and toy models."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest

from servinglib import LoadRetryOptions, ManagerOptions
from servinglib.core.servable_state import ManagerState
from servinglib.examples import HALF_PLUS_TWO, PYTHON_HALF_PLUS_TWO
from servinglib.loaders import PythonPlatformConfig
from servinglib.server.config import ModelConfig, ModelServerConfig
from servinglib.server.rest import RestApp, RestOptions, create_app, create_server
from servinglib.server.server_core import ServerCore
from servinglib.server.server_core_options import ServerCoreOptions
from servinglib.sources.version_policy import ServableVersionPolicy
from servinglib.testing import wait_until

TOY_MODEL = Path(__file__).with_name("toy_model.py")
CORE_OPTIONS = ServerCoreOptions(
    manager=ManagerOptions(load_retry=LoadRetryOptions(max_num_load_retries=0)),
    num_initial_load_threads=2,
    servable_state_waiter_timeout_s=30.0,
    platform_configs={"python": PythonPlatformConfig(allow_code_execution=True)},
)
"""Fail loads at once, wait at most 30 s at start, run the tests' own model.py files.

(servinglib.testing.plugin has the same options, but importing a pytest plugin from a test
module keeps pytest from rewriting it when another test enables it.)"""


def write_toy_model(root: Path) -> Path:
    """A base path with version 1 of the toy Python model."""
    version = root / "toy" / "1"
    version.mkdir(parents=True)
    shutil.copy(TOY_MODEL, version / "model.py")
    return root / "toy"


@pytest.fixture(scope="session")
def core(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerCore]:
    """half_plus_two (SavedModel, versions 1 and 2, labelled), py_half_plus_two and toy."""
    toy = write_toy_model(tmp_path_factory.mktemp("models"))
    config = ModelServerConfig(
        [
            ModelConfig(
                "half_plus_two",
                HALF_PLUS_TWO,
                "tensorflow",
                ServableVersionPolicy.all(),
                version_labels={"stable": 2, "canary": 1},
            ),
            ModelConfig.python("py_half_plus_two", PYTHON_HALF_PLUS_TWO),
            ModelConfig.python("toy", toy),
        ]
    )
    options = attrs.evolve(CORE_OPTIONS, allow_version_labels_for_unavailable_models=True)
    with ServerCore(config, options) as core:
        wait_until(lambda: _all_available(core, "half_plus_two", 2), 60.0)
        yield core


def _all_available(core: ServerCore, name: str, count: int) -> bool:
    versions = core.model_status(name).versions
    return len(versions) == count and all(v.state is ManagerState.AVAILABLE for v in versions)


@pytest.fixture(scope="session")
def app(core: ServerCore) -> Iterator[RestApp]:
    """The REST app over the session's core, with default options."""
    app = create_app(core, RestOptions())
    yield app
    app.close()


class Client:
    """A synchronous face on an in-process httpx client of an ASGI app (no sockets)."""

    def __init__(self, app: RestApp) -> None:
        self.app = app

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """One request, run on a fresh event loop."""

        async def send() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://rest.test") as c:
                return await c.request(method, path, **kwargs)

        return asyncio.run(send())

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        """GET ``path``."""
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> httpx.Response:
        """POST to ``path``."""
        return self.request("POST", path, **kwargs)


@pytest.fixture
def client(app: RestApp) -> Client:
    """An in-process client of the session's app."""
    return Client(app)


@contextlib.contextmanager
def served_app(app: RestApp) -> Iterator[str]:
    """``app`` served by uvicorn on a free port of 127.0.0.1; yields its URL, then stops the
    server and closes the app."""
    server, _port = create_server(app)
    server.start()
    try:
        yield server.url
    finally:
        server.stop()
        app.close()
