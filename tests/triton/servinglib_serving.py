"""servinglib serving a Triton repository of Python models on 127.0.0.1, over REST and gRPC.

The counterpart of :func:`tests.triton.oracle.running_triton`: the same repository, the same
kind of addresses (``host:port``, as tritonclient wants them).  REST and gRPC share one
DataPlane, as in the ``servinglib`` server: its statistics count the calls of both.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from servinglib.loaders import PythonPlatformConfig
from servinglib.server import ModelConfig, ModelServerConfig, ServerCore, ServerCoreOptions
from servinglib.server.plane.data_plane import DataPlane
from servinglib.testing._servers import LocalGrpcServer, LocalRestServer


@dataclass(frozen=True)
class Serving:
    """A started servinglib: its core, the DataPlane both front ends share, and their HTTP
    and gRPC addresses (``host:port``)."""

    core: ServerCore
    plane: DataPlane
    http_url: str
    grpc_url: str


def python_models_config(repository: Path) -> ModelServerConfig:
    """Every model directory of ``repository`` as a "python" model named after it."""
    return ModelServerConfig(
        [
            ModelConfig(model.name, str(model), "python")
            for model in sorted(repository.iterdir())
            if model.is_dir()
        ]
    )


@contextlib.contextmanager
def serving_repository(
    repository: Path, grpc_server: str = "sync", *, config: ModelServerConfig | None = None
) -> Iterator[Serving]:
    """servinglib serving every model of ``repository`` (code execution allowed) until the
    block ends; every model is loaded when it starts.  ``grpc_server``: "sync" or "aio";
    ``config``: the models (default: :func:`python_models_config`)."""
    options = ServerCoreOptions(
        platform_configs={"python": PythonPlatformConfig(allow_code_execution=True)}
    )
    models = config if config is not None else python_models_config(repository)
    with ServerCore(models, options) as core:
        plane = DataPlane(core)
        try:
            rest = LocalRestServer(plane)  # type: ignore[arg-type]  # create_app takes a plane
            try:
                grpc = LocalGrpcServer(plane, server=grpc_server)  # type: ignore[arg-type]
                try:
                    yield Serving(core, plane, rest.url.removeprefix("http://"), grpc.target)
                finally:
                    grpc.close()
            finally:
                rest.close()
        finally:
            plane.close()
