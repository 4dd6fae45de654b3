"""The models of ``--model_repository`` the server starts with, by ``--model_control_mode``."""

from __future__ import annotations

import logging

from servinglib.errors import ServingError
from servinglib.server.cli.flags import ServerFlags
from servinglib.server.config import ModelConfig, ModelServerConfig
from servinglib.server.management.model_control import ModelControl, ModelControlMode
from servinglib.server.reload_wait import failure_error
from servinglib.server.triton_repository import TritonRepository, with_config_files

_log = logging.getLogger("servinglib.server")


def model_control(flags: ServerFlags) -> ModelControl | None:
    """The repository and its control mode the flags name; None without ``--model_repository``."""
    if not flags.model_repository:
        return None
    return ModelControl(
        TritonRepository(flags.model_repository), ModelControlMode(flags.model_control_mode)
    )


def startup_models(flags: ServerFlags, repository: TritonRepository) -> list[ModelConfig]:
    """The repository's models to load at start: every one (none and poll modes), or
    ``--load_model``'s (explicit mode; ``*``: every one).

    A model that cannot be served (a config that does not parse, an ensemble, a GPU)
    fails the start, each named (Triton exits too), unless ``--start_degraded``: then
    each is logged in one line and the others are served.
    """
    names = repository.model_names()
    if flags.model_control_mode == "explicit" and "*" not in flags.load_model:
        names = list(dict.fromkeys(flags.load_model))
    models: list[ModelConfig] = []
    errors: dict[str, ServingError] = {}
    for name in names:
        try:
            models.append(repository.model(name))
        except ServingError as error:
            errors[name] = error
    if errors and not flags.start_degraded:
        raise failure_error(errors)
    for name, failure in sorted(errors.items()):
        _log.error("Model %s is not served: %s", name, failure.message)
    return models


def served_config(
    file_config: ModelServerConfig, served: ModelServerConfig, control: ModelControl | None
) -> ModelServerConfig:
    """The config to serve when a model config file (or the flags' model) is read anew.

    Its models, each with the ``config.pbtxt`` beside its versions if it has one,
    beside the repository's models served now (a model of both is an error naming it).
    """
    config = with_config_files(file_config)
    if control is None:
        return config
    repository = control.repository
    return repository.with_models(config, [m for m in served.models if repository.owns(m)])
