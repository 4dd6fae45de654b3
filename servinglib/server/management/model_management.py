"""ModelManagement: whether and where clients on the network may load, unload and reload models."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Final, final

import attrs

from servinglib.errors import InvalidArgumentError, PermissionDeniedError, shortened
from servinglib.server.config import ModelConfig, ModelServerConfig
from servinglib.server.logging_config import FILE_COLLECTOR
from servinglib.server.management.model_control import ModelControl
from servinglib.server.server_core import ServerCore

ENABLE_FLAG: Final = "--allow_remote_model_management"
"""The ``servinglib-server`` flag that turns remote model management on."""
ROOTS_FLAG: Final = "--model_management_roots"
"""The flag naming the directories remote calls may load models from."""
PYTHON_FLAG: Final = "--allow_remote_python_models"
"""The flag letting remote calls load python-platform models from paths they name."""
PYTHON_PLATFORM: Final = "python"


def _roots(value: Iterable[str] | str | None) -> tuple[str, ...] | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = value.split(",")
    return tuple(root.strip() for root in value if root.strip())


@final
@attrs.frozen
class ModelManagementOptions:
    """What remote model management may do.

    - ``enabled``: load, unload and reload models over the network (off by
      default: those calls answer PERMISSION_DENIED naming the flag).
    - ``allowed_roots``: the directories (and below) whose models remote
      calls may load, as a sequence or comma-separated text; None: the
      directories holding the models configured when the server started
      (``/models`` for ``/models/resnet``).  Base paths are resolved
      (symbolic links, ``..``) before the check.
    - ``allow_python_models``: let remote calls load ``python``-platform
      models from paths they name; without it a remote call may only name
      a python model's path that the server's own config already serves
      python models from (the python platform must allow code execution
      either way).

    Immutable, so thread-safe.
    """

    enabled: bool = False
    allowed_roots: tuple[str, ...] | None = attrs.field(default=None, converter=_roots)
    allow_python_models: bool = False


@final
class ModelManagement:
    """The management plane the front ends call: checks a call against the options, then runs it.

    A base path a client names must lie under an allowed root once
    resolved, unless it is one the server's own config serves (the config
    at start, or now).  The core is handed the resolved path (symbolic
    links followed once, at the check), so a link repointed afterwards
    cannot move a model outside the roots; a path the server's config at
    start names is kept as written (the operator's links are followed at
    every poll, as the config says).  A refused path is PERMISSION_DENIED with one message
    whether it exists or not, decided before anything but the path's
    resolution touches the file system.  A model's
    ``logging_config.log_collector_config.filename_prefix`` (with its
    collector type) must be one the server's config logs to (at start, or
    now), else PERMISSION_DENIED: a client cannot have the server write
    files anywhere it may write.  Relative base paths are resolved
    against the core's ``model_config_list_root_dir`` as ServerCore does.
    ``control``: a Triton model repository's control mode, whose load and
    unload calls :class:`ModelRepository` hands it.
    The calls block until ServerCore's do (run them off the event loop).
    Thread-safe: its state is fixed at construction; ServerCore serializes
    the changes.
    """

    def __init__(
        self,
        core: ServerCore,
        options: ModelManagementOptions | None = None,
        control: ModelControl | None = None,
    ) -> None:
        self._core = core
        self._options = options if options is not None else ModelManagementOptions()
        self._control = control
        started = [self._resolved(model) for model in core.config.models]
        self._operator_paths = frozenset(m.base_path for m in started)
        self._configured_logs = _log_targets(started)
        self._configured = frozenset(_real(m.base_path) for m in started)
        self._configured_python = frozenset(
            _real(m.base_path) for m in started if m.model_platform == PYTHON_PLATFORM
        )
        roots = self._options.allowed_roots
        if roots is None:
            local = (m.base_path for m in started if not _is_uri(m.base_path))
            roots = tuple(os.path.dirname(_real(path)) for path in local)
        uris = [root for root in roots if _is_uri(root)]
        if uris:
            raise InvalidArgumentError(
                f"Allowed model roots are local directories, not URIs such as {uris[0]!r}"
            )
        self._roots = tuple(dict.fromkeys(_real(root) for root in roots))

    @property
    def options(self) -> ModelManagementOptions:
        """The options this plane applies."""
        return self._options

    @property
    def control(self) -> ModelControl | None:
        """The model repository's control mode, which has its own calls; None: no repository."""
        return self._control

    @property
    def allowed_roots(self) -> tuple[str, ...]:
        """The resolved directories remote calls may load models from."""
        return self._roots

    def model_in_roots(self, name: str) -> str | None:
        """The directory ``<root>/<name>`` of the first allowed root that has one, or None.

        Triton's repository lookup, for a load that names a model and no base
        path (KServe's model agent puts each model in ``/mnt/models/<name>``
        and sends just that).  A name that is not one plain path component
        (``a/b``, ``..``) finds nothing.
        """
        if not name or name in {".", ".."} or os.sep in name or "\0" in name:
            return None
        for root in self._roots:
            path = os.path.join(root, name)
            if os.path.isdir(path):
                return path
        return None

    def check_enabled(self, action: str) -> None:
        """PermissionDeniedError naming the flag unless remote management is on.

        ``action`` says what was refused, e.g. "Loading model m".
        """
        if not self._options.enabled:
            raise PermissionDeniedError(
                f"{action} over the network is not allowed: remote model management is off; "
                f"start the server with {ENABLE_FLAG} (ModelManagementOptions(enabled=True) "
                "when embedding) to allow it"
            )

    def load_model(self, model: ModelConfig) -> None:
        """Adds (or replaces) ``model`` after the checks; as ServerCore.load_model.

        A model this call adds that fails to become available is removed
        again before the error is raised (Triton's explicit model control):
        readiness stays what it was.
        """
        self.check_enabled(f"Loading model {shortened(model.name)}")
        self._core.load_model(self._checked(model), remove_on_failure=True)

    def unload_model(self, name: str) -> None:
        """Removes model ``name`` if remote management is on; as ServerCore.unload_model."""
        self.check_enabled(f"Unloading model {shortened(name)}")
        self._core.unload_model(name)

    def reload_config(self, config: ModelServerConfig) -> None:
        """Makes ``config`` the served config after checking each of its models' paths.

        As ServerCore.reload_config; a config with no model leaves the server
        serving nothing, and not ready.
        """
        self.check_enabled("Reloading the model config")
        checked = [self._checked(model) for model in config.models]
        self._core.reload_config(ModelServerConfig(checked))

    def _checked(self, model: ModelConfig) -> ModelConfig:
        resolved = self._resolved(model)
        real = _real(resolved.base_path)
        current = (self._resolved(m) for m in self._core.config.models)
        served = {_real(m.base_path): m.model_platform for m in current}
        if real not in served and real not in self._configured and not self._under_roots(real):
            raise PermissionDeniedError(
                f"Model {shortened(model.name)}: base path {shortened(model.base_path)!r} is "
                "outside the directories "
                f"remote calls may load models from ({ROOTS_FLAG})"
            )
        if (
            resolved.model_platform == PYTHON_PLATFORM
            and not self._options.allow_python_models
            and real not in self._configured_python
            and served.get(real) != PYTHON_PLATFORM
        ):
            raise PermissionDeniedError(
                f"Model {shortened(model.name)}: remote calls may not load python models (they "
                "run code) from a path the server's config does not serve them from; start the "
                f"server with {PYTHON_FLAG} to allow it"
            )
        self._check_log_target(resolved)
        if _is_uri(real) or resolved.base_path in self._operator_paths:
            return resolved  # the operator's own path: its links are followed, as the config says
        # The path checked is the path served: a link repointed later is never followed.
        return attrs.evolve(resolved, base_path=real)

    def _check_log_target(self, model: ModelConfig) -> None:
        """Refuses a log collector target the server's config (at start, or now) has not."""
        target = _log_target(model)
        if target is None or not target[1]:
            return
        if target in self._configured_logs or target in _log_targets(self._core.config.models):
            return
        raise PermissionDeniedError(
            f"Model {shortened(model.name)}: logging_config.log_collector_config.filename_prefix "
            f"{shortened(target[1])!r} is not one the server's config logs to; remote calls may "
            "only keep a prefix the config has (set new ones in the model config file)"
        )

    def _under_roots(self, real: str) -> bool:
        if _is_uri(real):  # the roots are local directories
            return False
        return any(os.path.commonpath((root, real)) == root for root in self._roots)

    def _resolved(self, model: ModelConfig) -> ModelConfig:
        if not model.base_path_is_relative:
            return model
        root = self._core.options.model_config_list_root_dir
        if root is None:
            raise InvalidArgumentError(
                f"Model {model.name} has a relative base_path {model.base_path!r}: use an "
                "absolute path"
            )
        return model.resolve_base_path(root)


def _log_target(model: ModelConfig) -> tuple[str, str] | None:
    """The (collector type, filename_prefix) ``model``'s requests are logged to, or None."""
    logging = model.logging_config
    if logging is None:
        return None
    return (FILE_COLLECTOR if logging.is_file else logging.collector_type, logging.filename_prefix)


def _log_targets(models: Iterable[ModelConfig]) -> frozenset[tuple[str, str]]:
    return frozenset(target for m in models if (target := _log_target(m)) is not None)


def _is_uri(path: str) -> bool:
    return "://" in path


def _real(path: str) -> str:
    """``path`` with symbolic links and ``..`` resolved (a URI is kept as it is)."""
    return path if _is_uri(path) else os.path.realpath(path)
