"""ServerCoreOptions: how a ServerCore loads and serves, composed of its parts' own options."""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, final

import attrs

from servinglib.batching.options import BatchingParameters
from servinglib.core.aspired_version_policy import AspiredVersionPolicy
from servinglib.core.availability_preserving_policy import AvailabilityPreservingPolicy
from servinglib.core.basic_manager import ManagerOptions
from servinglib.sources.storage_path_source_config import FileSystemStoragePathSourceConfig

if TYPE_CHECKING:
    from servinglib.server.config import ModelConfig


def _default_initial_load_threads() -> int:
    return 4 * (os.cpu_count() or 1)


def _names(names: Iterable[str]) -> frozenset[str]:
    return frozenset(names)


def _no_servables(
    _options: object, _attribute: object, source: FileSystemStoragePathSourceConfig
) -> None:
    if source.servables:
        raise ValueError(
            "ServerCoreOptions.source must list no servables: the ServerCore watches its config's"
        )


# Keywords of the flat ServerCoreOptions (before the options composed): old name →
# (the part holding it now, its name there).
_MANAGER = "manager"
_RETRY = "manager.load_retry"
_SOURCE = "source"
_FLAT_KEYWORDS: Mapping[str, tuple[str, str]] = {
    "num_load_threads": (_MANAGER, "num_load_threads"),
    "num_unload_threads": (_MANAGER, "num_unload_threads"),
    "max_num_load_retries": (_RETRY, "max_num_load_retries"),
    "load_retry_interval_s": (_RETRY, "load_retry_interval_s"),
    "should_retry_model_load": (_RETRY, "should_retry"),
    "file_system_poll_wait_seconds": (_SOURCE, "file_system_poll_wait_seconds"),
    "servable_versions_always_present": (_SOURCE, "servable_versions_always_present"),
    "file_system_settle_window_s": (_SOURCE, "settle_window_s"),
    "version_done_marker": (_SOURCE, "version_done_marker"),
}
_NEW_SPELLING = {
    _MANAGER: "manager=ManagerOptions({name}=...)",
    _RETRY: "manager=ManagerOptions(load_retry=LoadRetryOptions({name}=...))",
    _SOURCE: "source=FileSystemStoragePathSourceConfig({name}=...)",
}


def _deprecated(old: str) -> str:
    part, name = _FLAT_KEYWORDS[old]
    return (
        f"ServerCoreOptions({old}=...) is deprecated: pass {_NEW_SPELLING[part].format(name=name)}"
    )


def _flat_read(old: str) -> property:
    """A read of a flat keyword of earlier releases (deprecated), from the part that holds it."""
    part, name = _FLAT_KEYWORDS[old]

    def read(options: ServerCoreOptions) -> object:
        warnings.warn(_deprecated(old), DeprecationWarning, stacklevel=2)
        holder = options.manager.load_retry if part == _RETRY else getattr(options, part)
        return getattr(holder, name)

    return property(read, doc=f"Deprecated: {_NEW_SPELLING[part].format(name=name)}.")


def _fold_flat_keywords(keywords: dict[str, Any]) -> dict[str, Any]:
    """``keywords`` with each flat keyword moved into the part that owns it, warning once each."""
    flat = {key: keywords.pop(key) for key in list(keywords) if key in _FLAT_KEYWORDS}
    if not flat:
        return keywords
    changes: dict[str, dict[str, Any]] = {_MANAGER: {}, _RETRY: {}, _SOURCE: {}}
    for old, value in flat.items():
        warnings.warn(_deprecated(old), DeprecationWarning, stacklevel=3)
        part, name = _FLAT_KEYWORDS[old]
        changes[part][name] = value
    manager: ManagerOptions = keywords.get(_MANAGER, ManagerOptions())
    if changes[_RETRY]:
        changes[_MANAGER]["load_retry"] = attrs.evolve(manager.load_retry, **changes[_RETRY])
    keywords[_MANAGER] = attrs.evolve(manager, **changes[_MANAGER])
    source: FileSystemStoragePathSourceConfig = keywords.get(
        _SOURCE, FileSystemStoragePathSourceConfig()
    )
    keywords[_SOURCE] = attrs.evolve(source, **changes[_SOURCE])
    return keywords


class _TakesFlatKeywords(type):
    """Lets ``ServerCoreOptions(num_load_threads=2)`` (the flat form) build the composed options.

    The flat keywords are not in the typed signature (type checkers flag them),
    but keep working, each with a DeprecationWarning naming its new spelling.
    """

    def __call__(cls, *args: Any, **keywords: Any) -> Any:  # noqa: ANN401 - any constructor
        return super().__call__(*args, **_fold_flat_keywords(keywords))


@final
@attrs.frozen
class ServerCoreOptions(metaclass=_TakesFlatKeywords):
    """How a ServerCore loads and serves (TF Serving's ServerCore::Options), composed of parts.

    Each part keeps its own options object and defaults: ``ManagerOptions``,
    ``FileSystemStoragePathSourceConfig`` (its ``servables`` come from the
    config and must be empty here), ``BatchingParameters`` and each
    platform's config (which holds its ``WarmupOptions``).  The flat keywords
    of earlier releases (``num_load_threads=``, ...) still work, and so do
    reads of them, with a DeprecationWarning naming the new spelling.
    Immutable, so thread-safe.
    """

    aspired_version_policy: AspiredVersionPolicy = attrs.field(factory=AvailabilityPreservingPolicy)
    """Which versions of a model to load and unload, and in what order."""

    manager: ManagerOptions = attrs.field(factory=ManagerOptions)
    """Load and unload threads (0: on the manager's thread) and load retries (N retries = N+1
    attempts)."""

    source: FileSystemStoragePathSourceConfig = attrs.field(
        factory=FileSystemStoragePathSourceConfig, validator=_no_servables
    )
    """How model base paths are watched: the poll period, the settle window (a new version loads
    once complete and unchanged this long), the done marker, and whether versions are always
    present (an empty or unreadable base path unloads nothing)."""

    num_initial_load_threads: int = attrs.field(
        factory=_default_initial_load_threads, validator=attrs.validators.ge(0)
    )
    """Load threads for the first config only (default 4 x CPUs); then ``manager``'s."""

    model_config_list_root_dir: str | None = None
    """Relative base paths in the config join this directory."""

    total_model_memory_limit_bytes: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.ge(0))
    )
    """RAM budget of all models' estimates (None: no limit); models loading on demand make room
    in it by unloading the least recently used idle ones (``--model_memory_budget``)."""

    load_models_on_demand: bool = False
    """Configured models are registered, not loaded, until a request names them (a model's own
    ``ModelConfig.load_on_demand`` overrides it); the others are pinned."""

    ready_without_models: bool = False
    """A core with no model configured is ready (Triton's explicit model control: a server that
    loads models when asked is ready before it has any); False: not ready, as TF Serving."""

    pinned_models: frozenset[str] = attrs.field(default=frozenset(), converter=_names)
    """Models loaded at start and never unloaded to make room, whatever else says they load on
    demand (``--load_model=NAME``)."""

    allow_version_labels: bool = True
    """Whether configs may assign version labels."""

    allow_version_labels_for_unavailable_models: bool = False
    """Whether a label may point at a version not (yet) available."""

    enable_reload_servables_with_error: bool = False
    """Whether a version that failed to load is tried again when it is aspired again."""

    platform_configs: Mapping[str, Any] = attrs.field(factory=dict)
    """Platform name → that platform's config, e.g. ``{"python":
    PythonPlatformConfig(allow_code_execution=True)}``; each holds its warmup options."""

    servable_state_waiter_timeout_s: float | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.ge(0))
    )
    """Longest wait for models to become available at start or reload (None: no limit)."""

    start_degraded: bool = False
    """If some models fail at start, serve the others (False: fail, as TF Serving)."""

    max_requests_in_flight_per_model: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.ge(1))
    )
    """Beyond it, a model's requests are refused at once with UNAVAILABLE (None: no limit)."""

    manage_state_interval_s: float = attrs.field(default=0.1, validator=attrs.validators.gt(0))
    """How often the manager acts on aspired versions when nothing wakes it."""

    batching_parameters: BatchingParameters | None = None
    """Batch every model's signatures with these (None: batching off, the default;
    ``--enable_batching``)."""

    enable_per_model_batching_parameters: bool = False
    """Each version uses the ``batching_params.pbtxt`` in its directory instead, and is not batched
    without one (``batching_parameters`` then only size the shared pool of batch threads)."""

    def loads_on_demand(self, model: ModelConfig) -> bool:
        """Whether ``model`` is registered and loaded on its first request, or pinned."""
        return model.name not in self.pinned_models and model.loads_on_demand(
            self.load_models_on_demand
        )

    # Deprecated reads of the flat keywords of earlier releases.
    num_load_threads = _flat_read("num_load_threads")
    num_unload_threads = _flat_read("num_unload_threads")
    max_num_load_retries = _flat_read("max_num_load_retries")
    load_retry_interval_s = _flat_read("load_retry_interval_s")
    should_retry_model_load = _flat_read("should_retry_model_load")
    file_system_poll_wait_seconds = _flat_read("file_system_poll_wait_seconds")
    servable_versions_always_present = _flat_read("servable_versions_always_present")
    file_system_settle_window_s = _flat_read("file_system_settle_window_s")
    version_done_marker = _flat_read("version_done_marker")
