"""Helpers of the gRPC front-end tests: a server on 127.0.0.1 in its own event-loop thread.

(Not in conftest.py: a module named ``conftest`` is not unique across test folders.)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import grpc

from servinglib import testing
from servinglib.examples import HALF_PLUS_TWO, PYTHON_HALF_PLUS_TWO
from servinglib.server.config import ModelConfig, ModelServerConfig
from servinglib.server.grpc import GrpcServer, GrpcServerOptions, RpcRecord, create_server
from servinglib.server.management.model_management import ModelManagement, ModelManagementOptions
from servinglib.server.plane.data_plane import DataPlane
from servinglib.server.server_core import ServerCore
from servinglib.sources.version_policy import ServableVersionPolicy

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

T = TypeVar("T")

# A Python model with a signature per use: dtypes, strings, a call that never ends (deadlines).
MODEL_PY = """
import asyncio
import ml_dtypes
import numpy as np
from servinglib.loaders import PythonModel, signature
from servinglib.servable import ExecutionMode, TensorSpec

TYPES = {"b": "bool", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
         "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
         "f16": "float16", "f32": "float32", "f64": "float64"}
TYPED = [TensorSpec(n, t, [-1]) for n, t in TYPES.items()]

class Model(PythonModel):
    def load(self, path):
        pass

    @signature(name="serving_default", inputs=[TensorSpec("x", "float32", [-1])],
               outputs=[TensorSpec("y", "float32", [-1]), TensorSpec("z", "float32", [-1])],
               execution_mode=ExecutionMode.INLINE)
    def plus(self, x):
        return {"y": x + 1, "z": x * 2}

    @signature(inputs=TYPED, outputs=TYPED)
    def types(self, **tensors):
        return tensors

    @signature(inputs=[TensorSpec("s", object, [-1])],
               outputs=[TensorSpec("upper", object, [-1]), TensorSpec("length", "int64", [-1])])
    def strings(self, s):
        return {"upper": np.array([v.upper() for v in s], dtype=object),
                "length": np.array([len(v) for v in s], dtype=np.int64)}

    @signature(inputs=[TensorSpec("h", ml_dtypes.bfloat16, [-1])],
               outputs=[TensorSpec("h", ml_dtypes.bfloat16, [-1])])
    def bf16(self, h):
        return {"h": h * 2}

    @signature(inputs=[TensorSpec("x", "float32", [-1])],
               outputs=[TensorSpec("y", "float32", [-1])], execution_mode=ExecutionMode.ASYNC)
    async def never(self, x):
        await asyncio.Event().wait()
"""


def write_python_model(root: Path, name: str = "py") -> ModelConfig:
    """Writes MODEL_PY as version 1 of ``name`` under ``root``; its ModelConfig."""
    return ModelConfig(name, str(testing.write_python_model(root, name, MODEL_PY)), "python")


def example_config(root: Path) -> ModelServerConfig:
    """half_plus_two (both versions, labels stable=1 and canary=2), its Python twin, MODEL_PY."""
    return ModelServerConfig(
        [
            ModelConfig(
                "half_plus_two",
                HALF_PLUS_TWO,
                "tensorflow",
                version_policy=ServableVersionPolicy.all(),
                version_labels={"stable": 1, "canary": 2},
            ),
            ModelConfig("python_half_plus_two", PYTHON_HALF_PLUS_TWO, "python"),
            write_python_model(root),
        ]
    )


class LoopThread:
    """An asyncio event loop running in a thread of its own; tests submit coroutines to it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T], timeout_s: float = 60.0) -> T:
        """Runs ``coroutine`` on the loop and returns its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout_s)

    def close(self) -> None:
        """Stops the loop and its thread."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=30)
        self.loop.close()


class Served:
    """A started GrpcServer, its loop, its address and the RPC records it reported."""

    def __init__(self, loop: LoopThread, server: GrpcServer, records: list[RpcRecord]) -> None:
        self.loop = loop
        self.server = server
        self.address = f"127.0.0.1:{server.port}"
        self.records = records

    def channel(self) -> grpc.Channel:
        """A new plaintext channel to the server (close it after use)."""
        return grpc.insecure_channel(self.address)


@contextlib.contextmanager
def serving(
    target: ServerCore | DataPlane,
    management: ModelManagementOptions | None = None,
    **options: Any,
) -> Iterator[Served]:
    """Serves ``target`` on 127.0.0.1, any free port, until the block ends.

    ``management``: what remote model management may do (default: nothing).
    """
    records: list[RpcRecord] = []
    loop = LoopThread()
    chosen = GrpcServerOptions(host="127.0.0.1", port=0, **options)
    core = target.core if isinstance(target, DataPlane) else target

    async def start() -> GrpcServer:
        plane = ModelManagement(core, management)
        server, port = create_server(target, chosen, management=plane, on_request=records.append)
        assert port == server.port > 0
        await server.start()
        return server

    server = loop.run(start())
    try:
        yield Served(loop, server, records)
    finally:
        loop.run(server.stop(0))
        loop.close()
