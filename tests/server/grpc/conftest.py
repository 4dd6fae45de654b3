"""Fixtures of the gRPC front-end tests: one ServerCore and one server per test module."""

from __future__ import annotations

from collections.abc import Iterator

import attrs
import grpc
import pytest
from grpc_servers import Served, example_config, serving

from servinglib.core.servable_state import ManagerState
from servinglib.server.grpc.options import SERVERS
from servinglib.server.server_core import ServerCore
from servinglib.testing import wait_until
from servinglib.testing.plugin import TEST_SERVER_CORE_OPTIONS


@pytest.fixture(scope="module")
def core(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerCore]:
    """One ServerCore per test module serving example_config."""
    root = tmp_path_factory.mktemp("models")
    options = attrs.evolve(
        TEST_SERVER_CORE_OPTIONS, allow_version_labels_for_unavailable_models=True
    )
    with ServerCore(example_config(root), options) as core:
        # The core waits for one available version per model; the tests want both of half_plus_two.
        wait_until(
            lambda: (
                [v.state for v in core.model_status("half_plus_two").versions]
                == [ManagerState.AVAILABLE] * 2
            ),
            timeout_s=60,
        )
        yield core


@pytest.fixture(scope="module", params=SERVERS)
def server_kind(request: pytest.FixtureRequest) -> str:
    """Each gRPC server in turn (grpcio's synchronous one, grpc.aio): tests run on both."""
    kind: str = request.param
    return kind


@pytest.fixture(scope="module")
def served(core: ServerCore, server_kind: str) -> Iterator[Served]:
    """One gRPC server of each kind per test module over ``core``."""
    with serving(core, server=server_kind) as served:
        yield served


@pytest.fixture
def channel(served: Served) -> Iterator[grpc.Channel]:
    """A plaintext channel to the module's server."""
    with served.channel() as channel:
        yield channel
