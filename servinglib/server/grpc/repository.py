"""Triton's model repository extension (index, load, unload) over ServerCore's load/unload."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Final, final

from servinglib.errors import InvalidArgumentError, NotFoundError, UnimplementedError
from servinglib.protos import grpc_service_pb2 as v2
from servinglib.server.config import ModelConfig
from servinglib.server.plane.model_management import ModelManagement
from servinglib.server.plane.repository_index import repository_index
from servinglib.server.server_core import ServerCore

CONFIG_PARAMETER: Final = "config"
"""The load parameter naming a model's base path and platform, as JSON."""


@final
class ModelRepository:
    """The models a server knows, loadable and unloadable by name.

    The repository is every model of the core's config plus every model it
    served before (unloaded ones stay known, so they can be loaded again).
    Loading an unknown model needs the ``config`` parameter, a JSON object
    ``{"base_path": "/models/m", "platform": "tensorflow"}`` (servinglib's
    keys; Triton's config.pbtxt has no base path).  Loads and unloads go
    through ``management`` (refused unless remote management is on, and
    confined to its roots), on a worker thread, and wait as ServerCore's do.
    Thread-safe.
    """

    def __init__(self, core: ServerCore, management: ModelManagement) -> None:
        self._core = core
        self._management = management
        self._lock = threading.Lock()
        self._known: dict[str, ModelConfig] = {}  # guarded by: _lock
        self._remember_config()

    def _remember_config(self) -> None:
        with self._lock:
            for model in self._core.config.models:
                self._known[model.name] = model

    def index(self, request: v2.RepositoryIndexRequest) -> v2.RepositoryIndexResponse:
        """One entry per known version (or per model without versions), READY ones only if asked."""
        self._remember_config()
        with self._lock:
            names = sorted(self._known)
        response = v2.RepositoryIndexResponse()
        for entry in repository_index(self._core, names, ready_only=request.ready):
            response.models.add(
                name=entry.name, version=entry.version, state=entry.state, reason=entry.reason
            )
        return response

    async def load(self, request: v2.RepositoryModelLoadRequest) -> v2.RepositoryModelLoadResponse:
        """Adds (or reloads) the model and waits until it serves or fails."""
        self._management.check_enabled(f"Loading model {request.model_name}")
        model = self._config_for(request)
        await asyncio.to_thread(self._management.load_model, model)
        with self._lock:
            self._known[model.name] = model
        return v2.RepositoryModelLoadResponse()

    async def unload(
        self, request: v2.RepositoryModelUnloadRequest
    ) -> v2.RepositoryModelUnloadResponse:
        """Removes the model from the config; its versions unload.  NOT_FOUND if not loaded."""
        self._management.check_enabled(f"Unloading model {request.model_name}")
        name = _model_name(request.model_name)
        self._remember_config()
        await asyncio.to_thread(self._management.unload_model, name)
        return v2.RepositoryModelUnloadResponse()

    def _config_for(self, request: v2.RepositoryModelLoadRequest) -> ModelConfig:
        name = _model_name(request.model_name)
        files = sorted(key for key in request.parameters if key.startswith("file:"))
        if files:
            raise UnimplementedError(
                f"Model {name}: override files ({files[0]}, ...) are not supported; load a model "
                "from its base path"
            )
        if CONFIG_PARAMETER in request.parameters:
            return _parse_config(name, request.parameters[CONFIG_PARAMETER].string_param)
        self._remember_config()
        with self._lock:
            known = self._known.get(name)
        if known is None:
            raise NotFoundError(
                f"Model {name} is not in the repository; to add it, pass its base path and "
                'platform in the "config" parameter: {"base_path": ..., "platform": ...}'
            )
        return known


def _model_name(name: str) -> str:
    if not name:
        raise InvalidArgumentError("The request names no model (model_name is empty)")
    return name


def _parse_config(name: str, text: str) -> ModelConfig:
    try:
        fields = json.loads(text)
    except json.JSONDecodeError as error:
        raise InvalidArgumentError(
            f"Model {name}: the config parameter is not JSON: {error}"
        ) from None
    if not isinstance(fields, dict) or not isinstance(fields.get("base_path"), str):
        raise InvalidArgumentError(
            f'Model {name}: the config parameter must be a JSON object with a "base_path" string'
            ' (and optionally "platform")'
        )
    platform = fields.get("platform", fields.get("model_platform", "tensorflow"))
    if not isinstance(platform, str):
        raise InvalidArgumentError(f'Model {name}: "platform" must be a string')
    return ModelConfig(name, fields["base_path"], platform)
