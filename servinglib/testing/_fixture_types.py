"""The types of the pytest plugin's factory fixtures, for annotating your tests.

They live here, not in servinglib.testing.plugin: a test module that imported the plugin
module before pytest loads it as a plugin would get pytest's "already imported" warning.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from servinglib.core.clock import Clock
from servinglib.loaders.registry import PlatformRegistry
from servinglib.server.config import ModelServerConfig
from servinglib.server.server_core import ServerCore
from servinglib.server.server_core_options import ServerCoreOptions
from servinglib.testing._model_dirs import Files


class ModelDirs(Protocol):
    """The ``model_dirs`` fixture: :func:`make_version_dirs` under ``tmp_path / "models"``."""

    def __call__(
        self,
        name: str,
        versions: Iterable[int],
        files: Files | Callable[[int], Files] | None = None,
    ) -> Path:
        """Creates ``<root>/name/<version>/`` for each version; returns ``<root>/name``."""
        ...


class ServerCoreFactory(Protocol):
    """The ``server_core`` fixture: makes started ServerCores, closed when the test ends."""

    def __call__(
        self,
        config: ModelServerConfig | Mapping[str, str | os.PathLike[str]],
        *,
        platform: str = ...,
        options: ServerCoreOptions | None = None,
        registry: PlatformRegistry | None = None,
        clock: Clock | None = None,
        **overrides: Any,  # noqa: ANN401 - ServerCoreOptions fields of any type
    ) -> ServerCore:
        """A ServerCore serving ``config`` (see servinglib.testing.plugin.server_core)."""
        ...


class RestClientFactory(Protocol):
    """The ``rest_client`` fixture: an httpx.Client on a real REST server serving ``core``."""

    def __call__(self, core: ServerCore, **rest_options: Any) -> Any:  # noqa: ANN401 - an httpx.Client
        """A client whose base_url is the server (see servinglib.testing.plugin.rest_client)."""
        ...


class GrpcChannelFactory(Protocol):
    """The ``grpc_channel`` fixture: a grpc.Channel to real gRPC servicers serving ``core``."""

    def __call__(self, core: ServerCore, **grpc_options: Any) -> Any:  # noqa: ANN401 - a grpc.Channel
        """A channel to the server (see servinglib.testing.plugin.grpc_channel)."""
        ...
