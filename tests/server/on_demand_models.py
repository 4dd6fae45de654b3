"""Helpers of the on-demand tests: Python models whose loads and calls the test holds and counts.

(Not in conftest.py: a module named ``conftest`` is not unique across test folders.)
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import sys
import threading
import types
from collections.abc import Iterator, Sequence
from pathlib import Path

import attrs

from servinglib import LoadRetryOptions, ManagerOptions, testing
from servinglib.core.servable_state import ManagerState, ServableState
from servinglib.loaders import PythonPlatformConfig
from servinglib.server.config import ModelConfig, ModelServerConfig
from servinglib.server.grpc import GrpcServer, GrpcServerOptions, create_server
from servinglib.server.plane.data_plane import DataPlane
from servinglib.server.rest import RestOptions, RestServer, create_app
from servinglib.server.server_core import ServerCore
from servinglib.server.server_core_options import ServerCoreOptions
from servinglib.testing import wait_until

HOOKS_MODULE = "servinglib_on_demand_test_hooks"
WAIT_S = 30.0

# A model adding its own number; its load and its call report to the test's hooks, which may
# hold them (the hooks are a module the test puts in sys.modules: the model loads in-process).
MODEL_PY = f"""
import sys
import numpy as np
from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec

class Model(PythonModel):
    def load(self, path):
        self.name = path.rstrip("/").split("/")[-2]
        sys.modules["{HOOKS_MODULE}"].HOOKS.loading(self.name)

    @signature(name="serving_default", inputs=[TensorSpec("x", "float32", [-1])],
               outputs=[TensorSpec("y", "float32", [-1])])
    def predict(self, x):
        sys.modules["{HOOKS_MODULE}"].HOOKS.calling(self.name)
        return {{"y": x + float(self.name[1:])}}
"""

OPTIONS = ServerCoreOptions(
    manager=ManagerOptions(load_retry=LoadRetryOptions(max_num_load_retries=0)),
    servable_state_waiter_timeout_s=WAIT_S,
    platform_configs={"python": PythonPlatformConfig(allow_code_execution=True)},
    load_models_on_demand=True,
)


class Hooks:
    """What the models' loads and calls do: counted; held while their gate is closed.

    Thread-safe.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.loads: collections.Counter[str] = collections.Counter()  # guarded by: _lock
        self.load_gates: dict[str, threading.Event] = {}
        self.call_gates: dict[str, threading.Event] = {}
        self.calls_entered: dict[str, threading.Event] = collections.defaultdict(threading.Event)
        self.fail_loads: set[str] = set()

    def loading(self, name: str) -> None:
        with self._lock:
            self.loads[name] += 1
        gate = self.load_gates.get(name)
        if gate is not None and not gate.wait(WAIT_S):
            raise RuntimeError(f"the test never opened the load gate of {name}")
        if name in self.fail_loads:
            raise RuntimeError(f"model {name} cannot load")

    def calling(self, name: str) -> None:
        self.calls_entered[name].set()
        gate = self.call_gates.get(name)
        if gate is not None and not gate.wait(WAIT_S):
            raise RuntimeError(f"the test never opened the call gate of {name}")

    def load_count(self, name: str) -> int:
        with self._lock:
            return self.loads[name]


@contextlib.contextmanager
def hooks() -> Iterator[Hooks]:
    """Fresh hooks the models report to, for the block."""
    module = types.ModuleType(HOOKS_MODULE)
    module.HOOKS = Hooks()  # type: ignore[attr-defined]
    sys.modules[HOOKS_MODULE] = module
    try:
        yield module.HOOKS  # type: ignore[attr-defined]
    finally:
        del sys.modules[HOOKS_MODULE]


def write_models(root: Path, count: int, padding_bytes: int = 100_000) -> list[ModelConfig]:
    """Models m0 .. m<count-1>, version 1 each, with ``padding_bytes`` of weights."""
    return [
        ModelConfig.python(
            f"m{i}",
            testing.write_python_model(
                root, f"m{i}", MODEL_PY, files={"weights.bin": b"\0" * padding_bytes}
            ),
        )
        for i in range(count)
    ]


def estimate_bytes(model: ModelConfig) -> int:
    """What ModelLoader estimates for version 1 of ``model``: its files' size x 1.2."""
    size = sum(p.stat().st_size for p in (Path(model.base_path) / "1").rglob("*") if p.is_file())
    return int(size * 1.2)


class Residents:
    """Follows which models have an available version, and the most at once.  Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.now: set[str] = set()  # guarded by: _lock
        self.most = 0  # guarded by: _lock
        self.unloaded: list[str] = []  # guarded by: _lock

    def __call__(self, state: ServableState) -> None:
        with self._lock:
            if state.manager_state is ManagerState.AVAILABLE:
                self.now.add(state.id.name)
                self.most = max(self.most, len(self.now))
            elif state.manager_state is ManagerState.UNLOADING:
                self.now.discard(state.id.name)
                self.unloaded.append(state.id.name)


def on_demand_core(
    models: Sequence[ModelConfig], *, budget_bytes: int | None, residents: Residents | None = None
) -> ServerCore:
    """A ServerCore serving ``models`` on demand within ``budget_bytes``."""
    options = attrs.evolve(OPTIONS, total_model_memory_limit_bytes=budget_bytes)
    listeners = [] if residents is None else [residents]
    core = ServerCore(ModelServerConfig(models), options, state_listeners=listeners)
    wait_until(core.ready, WAIT_S)  # the versions of the models on demand are found
    return core


class Served:
    """A DataPlane over a core, served by a REST server and a gRPC server on 127.0.0.1."""

    def __init__(self, plane: DataPlane, rest: RestServer, grpc_server: GrpcServer) -> None:
        self.plane = plane
        self.rest_url = f"http://127.0.0.1:{rest.port}"
        self.grpc_address = f"127.0.0.1:{grpc_server.port}"


@contextlib.contextmanager
def serving(
    core: ServerCore, *, rest_timeout_s: float = WAIT_S, grpc_server: str = "sync"
) -> Iterator[Served]:
    """Serves ``core`` over REST (``rest_timeout_s``: --rest_api_timeout_in_ms) and gRPC."""
    plane = DataPlane(core)
    app = create_app(plane, RestOptions(request_timeout_s=rest_timeout_s))
    rest = RestServer(app, "127.0.0.1", 0)
    rest.start()
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def start() -> GrpcServer:  # on its loop: grpc.aio binds the server to it
        server, _port = create_server(
            plane, GrpcServerOptions(host="127.0.0.1", port=0, server=grpc_server)
        )
        await server.start()
        return server

    server = asyncio.run_coroutine_threadsafe(start(), loop).result(WAIT_S)
    try:
        yield Served(plane, rest, server)
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(0), loop).result(WAIT_S)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(WAIT_S)
        loop.close()
        rest.stop()
        app.close()
        plane.close()
