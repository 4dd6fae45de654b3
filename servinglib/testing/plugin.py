"""servinglib's pytest plugin: fixtures for testing models, loaders and sources.

Opt-in: ``pytest -p servinglib.testing.plugin``, or in your top-level conftest.py
``pytest_plugins = ["servinglib.testing.plugin"]``.  Do not import this module yourself.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import pytest

from servinglib.core.basic_manager import ManagerOptions
from servinglib.core.clock import Clock
from servinglib.core.loader_harness import LoadRetryOptions
from servinglib.loaders.python import PythonPlatformConfig
from servinglib.loaders.registry import PlatformRegistry
from servinglib.server.config import ModelConfig, ModelServerConfig
from servinglib.server.server_core import ServerCore
from servinglib.server.server_core_options import ServerCoreOptions
from servinglib.testing._fake_clock import FakeClock
from servinglib.testing._fixture_types import (
    GrpcChannelFactory,
    ModelDirs,
    RestClientFactory,
    ServerCoreFactory,
)
from servinglib.testing._model_dirs import Files, make_version_dirs
from servinglib.testing._servers import LocalGrpcServer, LocalRestServer

__all__ = [
    "TEST_SERVER_CORE_OPTIONS",
    "fake_clock",
    "grpc_channel",
    "model_dirs",
    "rest_client",
    "server_core",
]

TEST_SERVER_CORE_OPTIONS = ServerCoreOptions(
    manager=ManagerOptions(load_retry=LoadRetryOptions(max_num_load_retries=0)),
    num_initial_load_threads=2,
    servable_state_waiter_timeout_s=30.0,
    platform_configs={"python": PythonPlatformConfig(allow_code_execution=True)},
)
"""What ``server_core`` builds with when given no options: a failed load fails at once, a
start waits at most 30 s, and the python platform runs the test's own model.py files."""


@pytest.fixture
def fake_clock() -> FakeClock:
    """A FakeClock at 0 s: time moves only when the test calls ``advance``."""
    return FakeClock()


@pytest.fixture
def model_dirs(tmp_path: Path) -> ModelDirs:
    """make_version_dirs rooted at ``tmp_path / "models"``: ``model_dirs("m", [1, 2], files)``."""
    root = tmp_path / "models"

    def make(
        name: str, versions: Iterable[int], files: Files | Callable[[int], Files] | None = None
    ) -> Path:
        return make_version_dirs(root, name, versions, files)

    return make


@pytest.fixture
def server_core() -> Iterator[ServerCoreFactory]:
    """A factory of started ServerCores; every core it made is closed when the test ends.

    ``config`` is a ModelServerConfig, or a mapping of model name → base
    path, each served on ``platform`` (default ``"tensorflow"``, as TF
    Serving).  ``options`` default to TEST_SERVER_CORE_OPTIONS; keyword
    ``overrides`` replace single fields (``start_degraded=True``).
    ``registry``: the platforms (e.g. a PlatformRegistry with your own).
    Construction waits until every model is available, as ServerCore does.
    """
    cores: list[ServerCore] = []

    def make(
        config: ModelServerConfig | Mapping[str, str | os.PathLike[str]],
        *,
        platform: str = "tensorflow",
        options: ServerCoreOptions | None = None,
        registry: PlatformRegistry | None = None,
        clock: Clock | None = None,
        **overrides: Any,  # noqa: ANN401 - ServerCoreOptions fields of any type
    ) -> ServerCore:
        if not isinstance(config, ModelServerConfig):
            config = ModelServerConfig(
                ModelConfig(name, os.fspath(path), platform) for name, path in config.items()
            )
        chosen = options if options is not None else TEST_SERVER_CORE_OPTIONS
        core = ServerCore(config, attrs.evolve(chosen, **overrides), registry=registry, clock=clock)
        cores.append(core)
        return core

    yield make
    for core in reversed(cores):
        core.close()


@pytest.fixture
def rest_client() -> Iterator[RestClientFactory]:
    """A factory: ``rest_client(core)`` → an ``httpx.Client`` on the REST app serving ``core``.

    The server listens on a free port of 127.0.0.1 in this process; the
    client's ``base_url`` points at it.  Keyword arguments are RestOptions
    fields.  Servers and clients are closed when the test ends.  Needs
    httpx and ``servinglib[rest]``.
    """
    import httpx

    made: list[tuple[LocalRestServer, httpx.Client]] = []

    def make(core: ServerCore, **rest_options: Any) -> httpx.Client:  # noqa: ANN401 - RestOptions fields
        server = LocalRestServer(core, **rest_options)
        client = httpx.Client(base_url=server.url, timeout=30)
        made.append((server, client))
        return client

    yield make
    for server, client in reversed(made):
        client.close()
        server.close()


@pytest.fixture
def grpc_channel() -> Iterator[GrpcChannelFactory]:
    """A factory: ``grpc_channel(core)`` → a ``grpc.Channel`` to the gRPC servicers of ``core``.

    Use it with the official stubs (``tensorflow_serving.apis``'s
    PredictionServiceStub, ``tritonclient.grpc`` takes the target instead:
    ``channel.target``).  Keyword arguments are GrpcServerOptions fields.
    Servers and channels are closed when the test ends.
    """
    import grpc

    made: list[tuple[LocalGrpcServer, Any]] = []

    def make(core: ServerCore, **grpc_options: Any) -> Any:  # noqa: ANN401 - GrpcServerOptions fields; a grpc.Channel
        server = LocalGrpcServer(core, **grpc_options)
        channel = grpc.insecure_channel(server.target)
        channel.target = server.target  # type: ignore[attr-defined]
        made.append((server, channel))
        return channel

    yield make
    for server, channel in reversed(made):
        channel.close()
        server.close()
