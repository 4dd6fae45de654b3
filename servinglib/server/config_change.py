"""ConfigChange: what a new model config changes against the one served, resolved and checked."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import final

import attrs

from servinglib.core.servable_state import ManagerState
from servinglib.core.servable_state_monitor import ServableStateMonitor
from servinglib.errors import FailedPreconditionError, InvalidArgumentError
from servinglib.server.config import ModelConfig, ModelServerConfig
from servinglib.server.server_core_options import ServerCoreOptions
from servinglib.sources.remote_store import local_path

_log = logging.getLogger("servinglib.server.server_core")


@final
@attrs.frozen
class ConfigChange:
    """What making ``config`` the served config changes.

    ``changed``: its new and changed models, base paths resolved (as they
    are in ``config``); ``removed``: the names it no longer holds;
    ``added``: the names it holds that the served config did not.
    Immutable, so thread-safe.
    """

    config: ModelServerConfig
    changed: tuple[ModelConfig, ...]
    removed: tuple[str, ...]
    added: tuple[str, ...]

    @classmethod
    def of(
        cls,
        served: ModelServerConfig,
        config: ModelServerConfig,
        *,
        root: str | None,
        check: Callable[[ModelConfig], None],
    ) -> ConfigChange:
        """The change from ``served`` to ``config``.

        Only added and changed models are resolved (see
        :func:`resolve_base_paths`) and checked: ``check(model)`` raises
        what is wrong with one, then a changed platform raises
        InvalidArgumentError; so a config is rejected whole.
        """
        changed = [
            m for m in config.models if (prev := served.model(m.name)) is not m and prev != m
        ]
        resolved = resolve_base_paths(changed, root)
        for model in resolved:
            check(model)
            old = served.model(model.name)
            if old is not None and old.model_platform != model.model_platform:
                raise InvalidArgumentError(
                    f"Illegal to change a model's platform: model {model.name} from "
                    f"'{old.model_platform}' to '{model.model_platform}'"
                )
        if resolved != changed:
            by_name = {m.name: m for m in resolved}
            config = ModelServerConfig(by_name.get(m.name, m) for m in config.models)
        removed = tuple(name for name in served.names if config.model(name) is None)
        added = tuple(m.name for m in changed if served.model(m.name) is None)
        return cls(config, tuple(resolved), removed, added)


def resolve_base_paths(models: Iterable[ModelConfig], root: str | None) -> list[ModelConfig]:
    """``models`` with ``file://`` base paths made paths and relative ones put under ``root``.

    Raises InvalidArgumentError for a relative base path without a root.
    """
    models = [
        attrs.evolve(m, base_path=local_path(m.base_path))
        if m.base_path.lower().startswith("file://")
        else m
        for m in models
    ]
    relative = [m for m in models if m.base_path_is_relative]
    if not relative:
        return models
    if root is None:
        model = relative[0]
        raise InvalidArgumentError(
            f"Model {model.name} has a relative base_path {model.base_path!r}: use an "
            "absolute path, or set model_config_list_root_dir"
        )
    return [m.resolve_base_path(root) for m in models]


def check_labels(
    model: ModelConfig,
    options: ServerCoreOptions,
    monitor: ServableStateMonitor,
    current: Mapping[str, int],
) -> None:
    """Raises FailedPreconditionError if ``model``'s labels are not allowed, or one points at a
    version not available (unless ``options`` allow that for a new or unchanged label)."""
    if not model.version_labels:
        return
    if not options.allow_version_labels:
        raise FailedPreconditionError(
            f"Model {model.name} has version labels, which this server does not allow "
            "(allow_version_labels)"
        )
    available = monitor.versions_in(model.name, ManagerState.AVAILABLE)
    for label, version in model.version_labels.items():
        if version in available:
            continue
        unchanged_or_new = current.get(label, version) == version
        if options.allow_version_labels_for_unavailable_models and unchanged_or_new:
            continue
        raise FailedPreconditionError(
            f"Request to assign label {label} to version {version} of model {model.name}, "
            "which is not currently available for inference"
        )


def warn_if_moved(
    previous: ModelConfig | None, model: ModelConfig, monitor: ServableStateMonitor
) -> None:
    """Says that versions loaded from the old base path keep serving (as in TF Serving)."""
    if previous is None or previous.base_path == model.base_path:
        return
    loaded = sorted(monitor.versions_in(model.name, ManagerState.AVAILABLE))
    if not loaded:
        return
    _log.warning(
        "Model %s: base_path changed from %s to %s; version %s stays loaded from the old "
        "base path (a version is known by its number, so the same number under the new "
        "one is not loaded again). To serve new files, give them a new version number, "
        "or remove the model from the config and add it back.",
        model.name,
        previous.base_path,
        model.base_path,
        ", ".join(map(str, loaded)),
    )
