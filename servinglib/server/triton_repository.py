"""TritonRepository: a Triton model repository directory, each model as a ModelConfig."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from typing import Final, final

import attrs

from servinglib.errors import (
    InvalidArgumentError,
    NotFoundError,
    ServingError,
    UnimplementedError,
    shortened,
)
from servinglib.loaders.triton.config import (
    CONFIG_FILE_NAME,
    TritonModelConfig,
    instance_count,
    parse_model_config,
    read_model_config,
    version_policy,
    warn_unimplemented,
)
from servinglib.protos.text_files import read_text_file
from servinglib.server.config import ModelConfig, ModelServerConfig

_log = logging.getLogger("servinglib.server")

# Triton's backend (or platform) → the servinglib platform serving it.
PLATFORMS: Final[Mapping[str, str]] = {
    "python": "python",
    "tensorflow": "tensorflow",
    "tensorflow_savedmodel": "tensorflow",
    "ensemble": "ensemble",
}
# The platform whose model file Triton's default_model_filename names inside each version
# directory (a SavedModel in <version>/model.savedmodel/); python's model.py is ours already.
_IN_MODEL_FILE: Final = frozenset({"tensorflow"})
_SAVEDMODEL: Final = "model.savedmodel"  # Triton's default_model_filename of a SavedModel
# What Triton's auto-complete recognizes in a version directory without a config.pbtxt.
_AUTO_COMPLETED: Final[Mapping[str, str]] = {
    _SAVEDMODEL: "tensorflow_savedmodel",
    "model.py": "python",
}


@final
@attrs.frozen
class RepositoryScan:
    """One look at a repository: the models it serves, and why others cannot be served.

    ``models``: a ModelConfig per model directory that maps onto ours, by
    name order; ``errors``: the other model directories' names, each with why
    (a config.pbtxt that does not parse, an ensemble, an unknown backend, a
    GPU).  Immutable, so thread-safe.
    """

    models: tuple[ModelConfig, ...]
    errors: Mapping[str, ServingError]

    @property
    def names(self) -> tuple[str, ...]:
        """Every model directory's name, served or not, sorted."""
        return tuple(sorted([*(m.name for m in self.models), *self.errors]))


@final
class TritonRepository:
    """A Triton model repository: ``<path>/<model>/config.pbtxt`` beside numbered versions.

    Each child directory is a model, as Triton has it: its ``config.pbtxt``
    (completed as Triton does) says its backend and scheduling; without
    one, a version directory holding ``model.savedmodel/`` is a SavedModel
    (Triton's auto-complete).  :meth:`model` maps one onto a
    :class:`ModelConfig`: ``python`` → our python platform,
    ``tensorflow``/``tensorflow_savedmodel`` → tensorflow (the SavedModel in
    each version's ``default_model_filename``), the version policy; the
    config is kept on it for the config answers.  Ensembles and other backends are
    refused (UNIMPLEMENTED, naming them), so are GPUs (INVALID_ARGUMENT).
    The config's fields servinglib does not implement are logged as a
    warning once per model and set of fields (in the process).
    Thread-safe: holds only its path.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._path = os.path.abspath(os.fspath(path))

    @property
    def path(self) -> str:
        """The repository directory (absolute)."""
        return self._path

    def model_names(self) -> list[str]:
        """The model directories' names, sorted (none when the repository cannot be listed)."""
        try:
            entries = list(os.scandir(self._path))
        except OSError:
            return []
        return sorted(e.name for e in entries if e.is_dir() and not e.name.startswith("."))

    def scan(self) -> RepositoryScan:
        """Every model of the repository, as :meth:`model` maps it, or why it cannot be."""
        models: list[ModelConfig] = []
        errors: dict[str, ServingError] = {}
        for name in self.model_names():
            try:
                models.append(self.model(name))
            except ServingError as error:
                errors[name] = error
        return RepositoryScan(tuple(models), errors)

    def model(self, name: str) -> ModelConfig:
        """The model directory ``name``, read now, as a ModelConfig.

        Raises NotFoundError when the repository has no such directory (or
        ``name`` is not one path component), and as :meth:`model_config`.
        """
        if not name or name in {".", ".."} or "/" in name or "\0" in name:
            raise NotFoundError(f"Model {shortened(name)!r} is not in the model repository")
        directory = os.path.join(self._path, name)
        if not os.path.isdir(directory):
            raise NotFoundError(f"Model {shortened(name)} is not in the model repository")
        return self.model_config(directory)

    def model_config(self, directory: str) -> ModelConfig:
        """The Triton model directory ``directory`` (anywhere) as a ModelConfig.

        Raises InvalidArgumentError for a config.pbtxt that does not parse, a
        model directory without one that auto-complete cannot complete, and
        a GPU; UnimplementedError for an ensemble and backends servinglib does
        not serve.
        """
        name = os.path.basename(os.path.normpath(directory))
        config = _read_config(directory, name)
        message = config.message
        backend = message.backend or message.platform
        platform = PLATFORMS.get(backend)
        if platform is None:
            raise UnimplementedError(
                f"Model {name}: Triton's {backend or 'unnamed'} backend is not served; "
                f"servinglib serves {', '.join(sorted(PLATFORMS))}"
            )
        _warn_not_applied(name, platform, config)
        return ModelConfig(
            name,
            directory,
            platform,
            version_policy(config),
            triton_config=config,
            model_filename=_model_filename(platform, config),
            load_on_demand=_load_on_demand(name, config),
        )

    def owns(self, model: ModelConfig) -> bool:
        """Whether ``model`` is one of this repository's: its base path a directory in it."""
        return os.path.dirname(os.path.normpath(model.base_path)) == self._path

    def with_models(
        self, served: ModelServerConfig, models: Iterable[ModelConfig]
    ) -> ModelServerConfig:
        """``served``'s models that are not this repository's, then ``models`` (its own).

        Raises InvalidArgumentError naming a model of both (``--model_config_file`` and
        ``--model_repository`` may not name one model twice).
        """
        others = [m for m in served.models if not self.owns(m)]
        names = {m.name for m in others}
        mine = list(models)
        for model in mine:
            if model.name in names:
                raise InvalidArgumentError(
                    f"Model {shortened(model.name)} is both in the model config and in the "
                    f"model repository {self._path}: rename one of them"
                )
        return ModelServerConfig([*others, *mine])


def with_config_files(config: ModelServerConfig) -> ModelServerConfig:
    """``config`` with each local model's ``config.pbtxt`` (beside its versions) attached.

    A model of a ``models.config`` laid out as Triton's gets the config's answers, its
    model file (a SavedModel in ``<version>/model.savedmodel``) and the warning naming
    the fields without effect; its platform and version policy stay the
    ``models.config``'s.  Raises InvalidArgumentError for a config.pbtxt that does not
    parse (or names another model), and as :func:`instance_count` for a GPU.
    """
    models = []
    for model in config.models:
        path = os.path.join(model.base_path, CONFIG_FILE_NAME)
        if model.triton_config is not None or not os.path.isfile(path):
            models.append(model)
            continue
        triton = parse_model_config(
            read_text_file(path, "Triton model configuration"), model.name, source=path
        )
        _warn_not_applied(model.name, model.model_platform, triton)
        models.append(
            attrs.evolve(
                model,
                triton_config=triton,
                model_filename=_model_filename(model.model_platform, triton),
            )
        )
    return ModelServerConfig(models)


def _warn_not_applied(name: str, platform: str, config: TritonModelConfig) -> None:
    """Warns (once) of the config's fields without effect on ``platform``; raises as
    :func:`instance_count` for a GPU.  A SavedModel's instance count is one of them: its calls
    already run concurrently on the worker pool (a TensorFlow function is thread-safe), so one
    copy serves what N instances would, without N copies of its weights."""
    fields = _unapplied(platform, config)
    if instance_count(config) > 1 and platform == "tensorflow":
        fields.append("instance_group.count (a SavedModel's calls already run concurrently)")
    warn_unimplemented(name, config.source, fields)


def _model_filename(platform: str, config: TritonModelConfig) -> str:
    if platform not in _IN_MODEL_FILE:
        return ""
    return config.message.default_model_filename or _SAVEDMODEL  # backend "tensorflow" alone


def _read_config(directory: str, name: str) -> TritonModelConfig:
    """The model's config.pbtxt, or the one Triton's auto-complete makes from its files."""
    if os.path.exists(os.path.join(directory, CONFIG_FILE_NAME)):
        return read_model_config(directory)
    platform = _auto_completed_platform(directory)
    if platform is None:
        raise InvalidArgumentError(
            f"Model {name} has no {CONFIG_FILE_NAME} and no version directory holding a model "
            f"file Triton completes a config for ({', '.join(_AUTO_COMPLETED)})"
        )
    field = "backend" if platform == "python" else "platform"
    return parse_model_config(f'{field}: "{platform}"', name, source=directory)


def _auto_completed_platform(directory: str) -> str | None:
    try:
        versions = [e for e in os.scandir(directory) if e.is_dir() and e.name.isdigit()]
    except OSError:
        return None
    for version in sorted(versions, key=lambda e: int(e.name), reverse=True):
        for filename, platform in _AUTO_COMPLETED.items():
            if os.path.exists(os.path.join(version.path, filename)):
                return platform
    return None


def _unapplied(platform: str, config: TritonModelConfig) -> list[str]:
    """The set fields of ``config`` a model of ``platform`` does not apply: a Python model's
    loader applies more than the config reader does (sequence batching, decoupled models)."""
    if platform != "python":
        return list(config.unimplemented)
    from servinglib.loaders.triton.python_config import not_implemented  # Python models only

    return not_implemented(config)


LOAD_ON_DEMAND_PARAMETER = "load_on_demand"
"""The config.pbtxt parameter (``string_value`` ``"true"`` or ``"false"``) that makes a model
load on demand or pins it, whatever ``--load_models_on_demand`` says."""


def _load_on_demand(name: str, config: TritonModelConfig) -> bool | None:
    parameter = config.message.parameters.get(LOAD_ON_DEMAND_PARAMETER)
    if parameter is None:
        return None
    value = parameter.string_value.strip().lower()
    if value not in {"true", "false"}:
        raise InvalidArgumentError(
            f"Model {name}: parameter {LOAD_ON_DEMAND_PARAMETER} is 'true' or 'false', "
            f"not {shortened(parameter.string_value)!r}"
        )
    return value == "true"
