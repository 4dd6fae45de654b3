"""servinglib serving a Triton repository of Python models on 127.0.0.1, over REST and gRPC.

The counterpart of :func:`tests.triton.oracle.running_triton`: the same repository, the same
kind of addresses (``host:port``, as tritonclient wants them).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from servinglib.loaders import PythonPlatformConfig
from servinglib.server import ModelConfig, ModelServerConfig, ServerCore, ServerCoreOptions
from servinglib.testing._servers import LocalGrpcServer, LocalRestServer


@dataclass(frozen=True)
class Serving:
    """A started servinglib: its core and its HTTP and gRPC addresses (``host:port``)."""

    core: ServerCore
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
        rest = LocalRestServer(core)
        try:
            grpc = LocalGrpcServer(core, server=grpc_server)
            try:
                yield Serving(core, rest.url.removeprefix("http://"), grpc.target)
            finally:
                grpc.close()
        finally:
            rest.close()
