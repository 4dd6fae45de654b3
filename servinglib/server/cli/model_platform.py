"""The model of ``--model_base_path``: its platform from ``--model_platform`` or its versions."""

from __future__ import annotations

import logging
import os

import attrs

from servinglib.errors import NotFoundError
from servinglib.loaders.platform_inference import infer_model_platform
from servinglib.server.cli.flags import ServerFlags
from servinglib.server.config import ModelConfig

_log = logging.getLogger("servinglib.server")


def flag_model(flags: ServerFlags) -> ModelConfig:
    """The model ``--model_name`` / ``--model_base_path`` serve, in the platform they hold.

    A relative base path is resolved against the working directory.
    Without ``--model_platform`` the platform is inferred (see
    :func:`infer_model_platform`) and one log line says which and why.
    Raises NotFoundError for a local base path that does not exist (unless
    ``--start_degraded``: it may appear later), before any runtime is imported.
    """
    model = ModelConfig(flags.model_name, flags.model_base_path).resolve_base_path(os.getcwd())
    local = os.path.isabs(model.base_path)
    if local and not flags.start_degraded and not os.path.isdir(model.base_path):
        problem = "is not a directory" if os.path.exists(model.base_path) else "does not exist"
        raise NotFoundError(f"--model_base_path {model.base_path} {problem}")
    if flags.model_platform:
        return attrs.evolve(model, model_platform=flags.model_platform)
    choice = infer_model_platform(model.base_path)
    _log.info("Model %s: platform %s (%s)", model.name, choice.platform, choice.reason)
    return attrs.evolve(model, model_platform=choice.platform)
