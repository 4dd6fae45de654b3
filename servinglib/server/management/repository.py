"""Triton's model repository extension: load and unload (the index is a model question:
:mod:`~servinglib.server.plane.repository_index`), for both front ends."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Final, final

from servinglib.errors import InvalidArgumentError, NotFoundError, UnimplementedError, shortened
from servinglib.loaders.platform_inference import infer_model_platform
from servinglib.server.config import ModelConfig
from servinglib.server.management.model_management import ModelManagement
from servinglib.server.plane.repository_index import RepositoryEntry, repository_index
from servinglib.server.server_core import ServerCore

CONFIG_PARAMETER: Final = "config"
"""The load parameter naming a model's base path and platform, as JSON."""


@final
class ModelRepository:
    """The models a server knows, loadable and unloadable by name, for any front end.

    The repository is every model the core has served
    (:meth:`ServerCore.known_models`: unloaded ones stay known, so they can
    be loaded again by name). Loading an unknown model needs the ``config``
    parameter, a JSON object ``{"base_path": "/models/m", "platform":
    "tensorflow"}`` (servinglib's keys; Triton's config.pbtxt has no base
    path). Without it, a model directory of that name under an allowed root
    (``/mnt/models/<name>``, as KServe's model agent leaves it) is loaded,
    its platform inferred from its files.  With a model repository (the
    management's :attr:`~ModelManagement.control`), the calls its mode
    :meth:`~ModelControl.governs` are its: refused outside explicit mode,
    else the repository's models loaded and unloaded by name.  Other loads
    and unloads go through
    ``management`` (refused unless remote management is on, and confined to
    its roots), on a worker thread, and wait as ServerCore's do. Front ends
    decode their request into these calls' arguments.
    Thread-safe: holds no state of its own.
    """

    def __init__(self, core: ServerCore, management: ModelManagement) -> None:
        self._core = core
        self._management = management
        self._control = management.control

    def index(self, *, ready_only: bool = False) -> list[RepositoryEntry]:
        """One entry per known version (or per model without versions), READY ones if asked.

        With a model repository, its models never served are listed too, by name alone
        (no version, no state), as Triton lists them; the repository is listed, not read.
        """
        index = repository_index(self._core, ready_only=ready_only)
        if self._control is None or ready_only:
            return index
        known = self._core.known_models()
        unserved = [
            RepositoryEntry(name, "", "", "")
            for name in self._control.repository.model_names()
            if name not in known
        ]
        return sorted([*index, *unserved], key=lambda entry: entry.name)

    async def load(self, name: str, parameters: Mapping[str, str]) -> None:
        """Adds (or reloads) model ``name`` and waits until it serves or fails.

        ``parameters``: the request's string parameters (``config``; Triton's
        ``file:`` overrides are refused as UNIMPLEMENTED).
        """
        await asyncio.to_thread(self.load_blocking, name, parameters)

    def load_blocking(self, name: str, parameters: Mapping[str, str]) -> None:
        """:meth:`load` blocking this thread (one that may block: not an event loop's)."""
        name = _model_name(name)
        served = self._core.config.model(name)
        if self._control is not None and self._control.governs(name, served, parameters):
            self._control.load(self._core, name)
            return
        self._management.check_enabled(f"Loading model {shortened(name)}")
        self._management.load_model(self._config_for(name, parameters))

    async def unload(self, name: str) -> None:
        """Removes the model from the config; its versions unload.  NOT_FOUND if not loaded."""
        await asyncio.to_thread(self.unload_blocking, name)

    def unload_blocking(self, name: str) -> None:
        """:meth:`unload` blocking this thread (one that may block: not an event loop's)."""
        name = _model_name(name)
        served = self._core.config.model(name)
        if self._control is not None and self._control.governs(name, served):
            self._control.unload(self._core, name)
            return
        self._management.check_enabled(f"Unloading model {shortened(name)}")
        self._management.unload_model(name)

    def _config_for(self, name: str, parameters: Mapping[str, str]) -> ModelConfig:
        files = sorted(key for key in parameters if key.startswith("file:"))
        if files:
            raise UnimplementedError(
                f"Model {name}: override files ({files[0]}, ...) are not supported; load a model "
                "from its base path"
            )
        if CONFIG_PARAMETER in parameters:
            return _parse_config(name, parameters[CONFIG_PARAMETER])
        known = self._core.known_models().get(name)
        if known is not None:
            return known
        found = self._management.model_in_roots(name)
        if found is None:
            raise NotFoundError(
                f"Model {shortened(name)} is not in the repository nor a directory of that name "
                "under the allowed roots; to add it, pass its base path and platform in the "
                '"config" parameter: {"base_path": ..., "platform": ...}'
            )
        return ModelConfig(name, found, infer_model_platform(found).platform)


def _model_name(name: str) -> str:
    if not name:
        raise InvalidArgumentError("The request names no model (model_name is empty)")
    return name


def _parse_config(name: str, text: str) -> ModelConfig:
    try:
        fields = json.loads(text)
    except json.JSONDecodeError as error:
        raise InvalidArgumentError(
            f"Model {shortened(name)}: the config parameter is not JSON: {error}"
        ) from None
    except RecursionError:  # the decoder's C stack bound, not a server fault
        raise InvalidArgumentError(
            f"Model {shortened(name)}: the config parameter is nested too deeply"
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
