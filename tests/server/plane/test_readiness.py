"""Readiness: ServerCore.ready(), REST /v2/health/ready, gRPC ServerReady and grpc.health.v1 agree.

Ready means every configured model has an AVAILABLE version (a Kubernetes
readiness probe must fail while one has none).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import attrs
import grpc
import httpx
import pytest
import tritonclient.grpc as triton_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from servinglib import FileSystemStoragePathSourceConfig
from servinglib.errors import ServingError
from servinglib.server.config import ModelConfig, ModelServerConfig
from servinglib.server.server_core import ServerCore
from servinglib.testing import wait_until, write_python_model
from servinglib.testing._servers import LocalGrpcServer, LocalRestServer
from servinglib.testing.plugin import TEST_SERVER_CORE_OPTIONS

MODEL_PY = """
import time
from pathlib import Path
from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec

class Model(PythonModel):
    def load(self, path):
        if (Path(path) / "BROKEN").exists():
            raise ValueError("this version is broken")
        gate = Path(path) / "WAIT"
        while gate.exists():
            time.sleep(0.01)

    @signature(
        inputs=[TensorSpec("x", "float32", [-1])], outputs=[TensorSpec("y", "float32", [-1])]
    )
    def predict(self, x):
        return {"y": x}
"""


def write_model(root: Path, name: str, *, broken: bool = False, wait: bool = False) -> ModelConfig:
    """Version 1 of a Python model ``name`` under ``root`` (broken, or loading until WAIT goes)."""
    flags = {flag: "" for flag, wanted in (("BROKEN", broken), ("WAIT", wait)) if wanted}
    return ModelConfig.python(name, write_python_model(root, name, MODEL_PY, files=flags))


@attrs.define
class Probes:
    """Every readiness answer of one core: its own, REST's, V2 gRPC's and grpc.health.v1's."""

    core: ServerCore
    rest: LocalRestServer
    grpc_server: LocalGrpcServer

    def answers(self) -> dict[str, bool]:
        with grpc.insecure_channel(self.grpc_server.target) as channel:
            health = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=30
            )
        triton = triton_grpc.InferenceServerClient(self.grpc_server.target)
        try:
            server_ready = triton.is_server_ready()
        finally:
            triton.close()
        return {
            "ServerCore.ready()": self.core.ready(),
            "REST /v2/health/ready": httpx.get(f"{self.rest.url}/v2/health/ready").status_code
            == 200,
            "gRPC ServerReady": server_ready,
            "grpc.health.v1": health.status == health_pb2.HealthCheckResponse.SERVING,
        }

    def all_say(self, ready: bool) -> bool:
        return set(self.answers().values()) == {ready}


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[tuple[Path, list[Probes]]]:
    """Starts REST and gRPC servers over a core the test builds; stops them at the end."""
    started: list[Probes] = []
    yield tmp_path, started
    for probes in started:
        probes.rest.close()
        probes.grpc_server.close()
        probes.core.close()


def probes_of(core: ServerCore, started: list[Probes]) -> Probes:
    probes = Probes(core, LocalRestServer(core), LocalGrpcServer(core))
    started.append(probes)
    return probes


DEGRADED = attrs.evolve(
    TEST_SERVER_CORE_OPTIONS,
    start_degraded=True,
    source=FileSystemStoragePathSourceConfig(file_system_poll_wait_seconds=0.2),
)


def test_a_model_without_versions_keeps_every_probe_not_ready_until_it_serves(
    serve: tuple[Path, list[Probes]],
) -> None:
    """A configured model whose directory holds no version yet: not ready anywhere, then ready."""
    root, started = serve
    (root / "late").mkdir()
    config = ModelServerConfig(
        [write_model(root, "a"), ModelConfig("late", str(root / "late"), "python")]
    )
    # At start the core waits for "late" until the waiter's timeout, then serves degraded.
    options = attrs.evolve(DEGRADED, servable_state_waiter_timeout_s=1.0)
    probes = probes_of(ServerCore(config, options), started)
    assert probes.answers() == dict.fromkeys(probes.answers(), False)
    write_model(root, "late")
    wait_until(lambda: probes.all_say(True), timeout_s=30)


def test_a_model_whose_every_version_failed_is_not_ready(serve: tuple[Path, list[Probes]]) -> None:
    """start_degraded serves the healthy models, but readiness fails while one model has failed."""
    root, started = serve
    config = ModelServerConfig([write_model(root, "a"), write_model(root, "bad", broken=True)])
    probes = probes_of(ServerCore(config, DEGRADED), started)
    assert "bad" in probes.core.failed_models()
    assert probes.all_say(False)
    probes.core.unload_model("bad")  # the config no longer asks for it
    assert probes.all_say(True)


def test_a_model_added_by_a_reload_is_not_ready_while_it_loads(
    serve: tuple[Path, list[Probes]],
) -> None:
    """While a reload's new model loads, readiness fails; once it serves, readiness returns."""
    root, started = serve
    a = write_model(root, "a")
    probes = probes_of(ServerCore(ModelServerConfig([a]), TEST_SERVER_CORE_OPTIONS), started)
    assert probes.all_say(True)
    slow = write_model(root, "slow", wait=True)
    errors: list[ServingError] = []

    def reload() -> None:
        try:
            probes.core.reload_config(ModelServerConfig([a, slow]))
        except ServingError as error:
            errors.append(error)

    thread = threading.Thread(target=reload)
    thread.start()
    wait_until(lambda: probes.core.list_models() == ["a", "slow"])
    assert probes.all_say(False)
    (root / "slow" / "1" / "WAIT").unlink()
    thread.join(30)
    assert errors == []
    assert probes.all_say(True)


def test_no_configured_model_is_not_ready(serve: tuple[Path, list[Probes]]) -> None:
    """A core serving nothing is not ready, before a config and after one removing every model."""
    root, started = serve
    probes = probes_of(ServerCore(None, TEST_SERVER_CORE_OPTIONS), started)
    assert probes.all_say(False)
    probes.core.reload_config(ModelServerConfig([write_model(root, "a")]))
    assert probes.all_say(True)
    probes.core.reload_config(ModelServerConfig([]))
    assert probes.all_say(False)
