"""ServerCore: a model server in one Python object — config in, handles out."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, final

from servinglib.batching.scheduler import SharedBatchScheduler
from servinglib.core.aspired_versions_manager import AspiredVersionsManager
from servinglib.core.clock import Clock
from servinglib.core.event_bus import EventBus
from servinglib.core.on_demand_loads import OnDemandLoads
from servinglib.core.servable_handle import ServableHandle
from servinglib.core.servable_request import ServableRequest
from servinglib.core.servable_state import ManagerState, ServableState
from servinglib.core.servable_state_monitor import ServableStateAndTime, ServableStateMonitor
from servinglib.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    ServingError,
    StatusCode,
    UnavailableError,
    UnimplementedError,
    wrong_type,
)
from servinglib.loaders.registry import PlatformRegistry, default_registry
from servinglib.servable import Servable
from servinglib.server.config import ModelConfig, ModelServerConfig
from servinglib.server.config_change import (
    ConfigChange,
    check_labels,
    resolve_base_paths,
    warn_if_moved,
)
from servinglib.server.model_spec import ModelSpec
from servinglib.server.reload_wait import ReloadWaits, failure_error
from servinglib.server.server_core_options import ServerCoreOptions
from servinglib.server.serving_pipeline import ServingPipeline
from servinglib.server.state_log import ServableStateLog
from servinglib.server.status import ModelMetadata, ModelStatus, VersionStatus
from servinglib.sources.remote_mirror import StoreEvent

# ServerCoreOptions is re-exported: earlier releases defined it here.
__all__ = ["ServerCore", "ServerCoreOptions"]

_log = logging.getLogger(__name__)


@final
class ServerCore:
    """Serves the models of a ModelServerConfig through a :class:`ServingPipeline`.

    Constructing it loads the config and waits as :meth:`reload_config` does;
    a failure raises (or, with ``start_degraded``, is recorded and the
    healthy models serve).  ``state_listeners`` are subscribed before that
    first load and run on the publishing thread.  Loads, unloads and failures
    are logged on ``servinglib.server``; the library adds no handler.
    Thread-safe; config changes serialize, but not the waits for their models.
    """

    def __init__(
        self,
        config: ModelServerConfig | None = None,
        options: ServerCoreOptions | None = None,
        *,
        registry: PlatformRegistry | None = None,
        clock: Clock | None = None,
        state_listeners: Iterable[Callable[[ServableState], None]] = (),
    ) -> None:
        if config is not None and not isinstance(config, ModelServerConfig):
            raise wrong_type("ServerCore's config", "a ModelServerConfig or None", config)
        if options is not None and not isinstance(options, ServerCoreOptions):
            raise wrong_type("ServerCore's options", "a ServerCoreOptions or None", options)
        self._options = options if options is not None else ServerCoreOptions()
        self._reload_lock = threading.Lock()
        self._lock = threading.Lock()
        self._config = ModelServerConfig()  # guarded by: _reload_lock (writes)
        # Every model config served, now or before (the repository index): replaced whole.
        self._known: Mapping[str, ModelConfig] = {}
        self._labels: Mapping[str, Mapping[str, int]] = {}  # replaced whole
        self._failed: dict[str, ServingError] = {}  # guarded by: _lock
        self._closed = False  # guarded by: _lock (writes)
        self._draining = False
        self._pipeline = ServingPipeline(
            self._options, registry if registry is not None else default_registry, clock
        )
        self._bus = self._pipeline.event_bus
        self._monitor = self._pipeline.monitor
        self._manager = self._pipeline.manager
        self._waits = ReloadWaits(self._monitor)  # drain() and close() wake them all
        self._bus.subscribe(self._on_state)
        self._bus.subscribe(ServableStateLog().on_state)
        for listener in state_listeners:
            self._bus.subscribe(listener)
        self._pipeline.start()
        if config is not None:
            try:
                self._initial_load(config)
            except BaseException:
                self.close()
                raise

    def _on_state(self, state: ServableState) -> None:
        """A model that failed and now has an available version is failed no more."""
        if state.manager_state is ManagerState.AVAILABLE:
            with self._lock:
                self._failed.pop(state.id.name, None)

    # -- properties ---------------------------------------------------------

    @property
    def options(self) -> ServerCoreOptions:
        """The options this core was built with."""
        return self._options

    @property
    def config(self) -> ModelServerConfig:
        """The config being served (the complete desired state)."""
        return self._config

    @property
    def monitor(self) -> ServableStateMonitor:
        """The state monitor of every version's lifecycle events."""
        return self._monitor

    @property
    def event_bus(self) -> EventBus[ServableState]:
        """The bus lifecycle events are published on."""
        return self._bus

    @property
    def store_events(self) -> EventBus[StoreEvent]:
        """What the object stores of remote base paths did: downloads, failed listings."""
        return self._pipeline.source.store_events

    def store_work(self) -> list[str]:
        """What the stores of remote base paths are doing now (listings and downloads running,
        with progress); :meth:`close` cancels them."""
        return self._pipeline.source.store_work()

    @property
    def manager(self) -> AspiredVersionsManager:
        """The manager (for inspection and tests)."""
        return self._manager

    @property
    def on_demand(self) -> OnDemandLoads:
        """The models loaded on demand: what a request for one that is not loaded waits for
        (:meth:`OnDemandLoads.demand`), and the budget they are unloaded to fit."""
        return self._pipeline.on_demand

    @property
    def batch_scheduler(self) -> SharedBatchScheduler | None:
        """The shared batch scheduler (statistics, metrics observers); None without batching."""
        batching = self._pipeline.batching
        return batching.scheduler if batching is not None else None

    # -- request path -------------------------------------------------------

    def servable_handle(self, model_spec: ModelSpec) -> ServableHandle[Any]:
        """A handle to the version ``model_spec`` selects (number, label, or latest).

        Raises NotFoundError / UnavailableError (see Manager.servable_handle),
        InvalidArgumentError for an unknown label (or labels not allowed).
        Release the handle soon.  (``max_requests_in_flight_per_model`` bounds
        the requests of a DataPlane, not handles.)  TypeError if
        ``model_spec`` is not a ModelSpec.
        """
        if not isinstance(model_spec, ModelSpec):
            raise _not_a_model_spec("servable_handle()", model_spec)
        return self._manager.servable_handle(self._request_for(model_spec))

    def label_version(self, name: str, label: str) -> int:
        """The version ``label`` of model ``name`` points at.

        Raises InvalidArgumentError (TF Serving's code) when labels are not
        allowed or the model has no such label, NotFoundError for a model
        that is not configured.
        """
        if not self._options.allow_version_labels:
            raise InvalidArgumentError(
                "Model version labels are not allowed by this server (allow_version_labels)"
            )
        if self._config.model(name) is None:
            raise NotFoundError(f"Could not find model {name}")
        version = self._labels.get(name, {}).get(label)
        if version is None:
            raise InvalidArgumentError(
                f"Unrecognized servable version label: {label} (model {name})"
            )
        return version

    def _request_for(self, model_spec: ModelSpec) -> ServableRequest:
        if model_spec.version_label is not None:
            version = self.label_version(model_spec.name, model_spec.version_label)
            return ServableRequest.specific(model_spec.name, version)
        if model_spec.version is not None:
            return ServableRequest.specific(model_spec.name, model_spec.version)
        return ServableRequest.latest(model_spec.name)

    def resolve_version(self, model_spec: ModelSpec) -> int:
        """The version ``model_spec`` selects now (number, label, or latest), taking no handle.

        A question, not a request: the in-flight bound does not apply.
        Raises what :meth:`servable_handle` raises but UnavailableError for
        the bound.
        """
        if not isinstance(model_spec, ModelSpec):
            raise _not_a_model_spec("resolve_version()", model_spec)
        version = self._manager.resolve(self._request_for(model_spec)).version
        self._check_required(model_spec.name)
        return version

    def _check_required(self, name: str) -> None:
        """Raises UnavailableError when a model ``name`` requires (an ensemble's step) does not
        serve now, naming it and why."""
        config = self._config.model(name)
        for required, version in () if config is None else config.required_models:
            spec = ModelSpec(required) if version is None else ModelSpec(required, version)
            try:
                self._manager.resolve(self._request_for(spec))
            except ServingError as error:
                raise UnavailableError(
                    f"Model {name} is not ready: the model {spec} it calls is not: {error}"
                ) from None

    def model_metadata(self, model_spec: ModelSpec) -> ModelMetadata:
        """The platform and signatures of the version ``model_spec`` selects.

        A question, not a request: the in-flight bound does not apply (the
        servable is held only while its signatures are read).
        """
        if not isinstance(model_spec, ModelSpec):
            raise _not_a_model_spec("model_metadata()", model_spec)
        config = self._config.model(model_spec.name)
        with self._manager.servable_handle(self._request_for(model_spec)) as handle:
            servable = handle.servable
            if not isinstance(servable, Servable):
                raise UnimplementedError(
                    f"Model {model_spec.name} serves a {type(servable).__name__}, which has no "
                    "signatures"
                )
            return ModelMetadata(
                model_spec.name,
                handle.id.version,
                config.model_platform if config is not None else "",
                servable.signatures,
            )

    # -- status -------------------------------------------------------------

    def list_models(self) -> list[str]:
        """The names of the configured models, sorted."""
        return sorted(self._config.names)

    def known_models(self) -> dict[str, ModelConfig]:
        """Every model this core has served, configured now or removed since, by name.

        What a repository index lists, and what a remote load of a model by
        name alone brings back.
        """
        return dict(self._known)

    def model_status(self, name: str, version: int | None = None) -> ModelStatus:
        """Every known version of ``name`` (or just ``version``), newest first, with errors.

        Raises NotFoundError for a model neither configured nor ever seen, or
        an unknown version.  ``error`` is a model-level problem: its base path
        cannot be read, or it failed to start.
        """
        if not isinstance(name, str):
            raise wrong_type("model_status()'s name", "a model name (str)", name)
        registered = self._pipeline.on_demand.registered(name)
        if registered is not None:
            return _registered_status(name, version, *registered)
        states = self._monitor.get_version_states(name)
        if self._config.model(name) is None and not states:
            raise NotFoundError(f"Could not find any versions of model {name}")
        if version is not None:
            if version not in states:
                raise NotFoundError(f"Could not find version {version} of model {name}")
            states = {version: states[version]}
        versions = tuple(
            VersionStatus(v, s.state.manager_state, _with_heal_hint(s.state.health))
            for v, s in sorted(states.items(), reverse=True)
        )
        with self._lock:
            error = self._failed.get(name)
        return ModelStatus(name, versions, self._monitor.storage_condition(name).error or error)

    def failed_models(self) -> dict[str, ServingError]:
        """Models that failed to become available at start or reload, with why."""
        with self._lock:
            return dict(self._failed)

    def ready(self) -> bool:
        """True when every configured model has an AVAILABLE version: the one readiness answer.

        Not ready: a configured model still loading, one whose every version
        failed (:meth:`failed_models`), one whose directory holds no version yet,
        a core with no model configured (unless ``ready_without_models``), and a core
        drained or closed.  Models
        swapping versions stay ready under the availability-preserving policy.
        A model loaded on demand is ready once its versions are found:
        registered, it loads when a request names it.
        """
        if self._closed or self._draining:
            return False
        names = self._config.names
        if not names:
            return self._options.ready_without_models
        available = {
            servable_id.name for servable_id in self._manager.list_available_servable_ids()
        }
        registered = self._pipeline.on_demand.registered_with_versions
        if not all(name in available or registered(name) for name in names):
            return False
        try:
            for name in names:
                if name in available:  # (a registered model's steps load with it)
                    self._check_required(name)
        except UnavailableError:
            return False
        return True

    def drain(self) -> None:
        """Reports not ready from now on (health checks fail), while requests are still served.

        The first step of a graceful shutdown: load balancers stop sending
        before the servers stop accepting.  Reloads waiting for models stop
        waiting (their new models fail with UNAVAILABLE).  Idempotent.
        """
        self._draining = True
        self._waits.wake_all()

    @property
    def draining(self) -> bool:
        """True once :meth:`drain` was called."""
        return self._draining

    # -- control path -------------------------------------------------------

    def reload_config(self, config: ModelServerConfig) -> None:
        """Makes ``config`` the complete desired state and waits for its new models.

        Models absent from ``config`` unload; new ones are waited for until each
        has an available version, fails, or ``servable_state_waiter_timeout_s``
        passes.  A config that does not validate is rejected whole and the
        previous one keeps serving.  New models that fail raise an error naming
        them (they stay configured, in error; one whose base path holds no
        version fails at once, NOT_FOUND, and loads when one appears).  The wait
        holds no lock: :meth:`drain` and :meth:`close` end it.
        """
        if not isinstance(config, ModelServerConfig):
            raise wrong_type(
                "reload_config()'s config", "a ModelServerConfig (a tuple of ModelConfig)", config
            )
        self._reload(lambda _current: config, initial=False)

    def update_config(self, edit: Callable[[ModelServerConfig], ModelServerConfig]) -> None:
        """Makes ``edit(served config)`` the served config, and waits as reload_config does.

        ``edit`` runs under the lock that serializes config changes, so it sees
        every change made before and none is lost in between (what a producer
        of part of the models, such as a model repository poller, needs); it
        may raise a ServingError to change nothing.
        """
        self._reload(edit, initial=False)

    def load_model(self, model: ModelConfig, *, remove_on_failure: bool = False) -> None:
        """Adds (or replaces) one model in the config and waits for it, as reload_config does.

        ``remove_on_failure``: a model this call added that fails to become
        available is removed again before the error is raised (Triton's
        explicit model control), so readiness is what it was; a change made
        to it meanwhile by another call is kept.
        """
        if not isinstance(model, ModelConfig):
            raise wrong_type(
                "load_model()'s model", "a ModelConfig (e.g. ModelConfig.python(name, path))", model
            )
        added: list[bool] = []

        def with_model(current: ModelServerConfig) -> ModelServerConfig:
            added.append(current.model(model.name) is None)
            return current.with_model(model)

        try:
            self._reload(with_model, initial=False)
        except ServingError:
            if remove_on_failure and added == [True]:
                self._remove_if_unchanged(model)
            raise

    def _remove_if_unchanged(self, model: ModelConfig) -> None:
        """Removes ``model`` (as load_model configured it) unless its config changed since."""
        (applied,) = resolve_base_paths([model], self._options.model_config_list_root_dir)

        def without(current: ModelServerConfig) -> ModelServerConfig:
            if current.model(model.name) != applied:
                return current
            return current.without_model(model.name)

        self._reload(without, initial=False)

    def unload_model(self, name: str) -> None:
        """Removes one model from the config (its versions unload); NotFoundError if absent."""
        if not isinstance(name, str):
            raise wrong_type("unload_model()'s name", "a model name (str)", name)

        def without(current: ModelServerConfig) -> ModelServerConfig:
            if current.model(name) is None:
                raise NotFoundError(f"Model {name} is not in the config")
            return current.without_model(name)

        self._reload(without, initial=False)

    def close(self, timeout_s: float | None = None) -> bool:
        """Stops polling and unloads every model; True once all is unloaded.  Idempotent.

        Unloading a version waits until the handles to it still held are
        released; each such version is logged after 5 s (handles held, how
        long), then every 60 s.  With ``timeout_s``, returns False when that
        passed first: the handles held are logged, and the unload goes on in
        the background.  Calling it again waits again (for ``timeout_s``).
        """
        with self._lock:
            self._closed = True
        self._waits.wake_all()
        return self._pipeline.close(timeout_s)

    def __enter__(self) -> ServerCore:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- reload internals ---------------------------------------------------

    def _initial_load(self, config: ModelServerConfig) -> None:
        basic = self._manager.basic_manager
        basic.set_num_load_threads(self._options.num_initial_load_threads)
        try:
            self._reload(lambda _current: config, initial=True)
        finally:
            basic.set_num_load_threads(self._options.manager.num_load_threads)

    def _reload(
        self, edit: Callable[[ModelServerConfig], ModelServerConfig], *, initial: bool
    ) -> None:
        """Applies ``edit(current config)`` under the reload lock, then waits without it.

        The wait for new models can be long (a slow load) or endless (a load
        that hangs): other reloads, unloads and close() must not queue behind it.
        """
        with self._reload_lock:
            awaited = self._apply_locked(edit(self._config))
        failures = self._waits.wait(
            awaited,
            timeout_s=self._options.servable_state_waiter_timeout_s,
            abandoned=self._abandoned,
        )
        with self._reload_lock, self._lock:  # a model removed meanwhile is no failure of ours
            self._failed.update((n, e) for n, e in failures.items() if self._config.model(n))
        if not failures:
            return
        error = failure_error(failures)
        if initial and self._options.start_degraded:
            _log.error("%s; serving the others (start_degraded)", error.message)
            return
        raise error

    def _apply_locked(
        self, config: ModelServerConfig
    ) -> dict[str, Mapping[int, ServableStateAndTime]]:
        """Makes ``config`` the desired state; returns the new models, with their states before."""
        if self._closed:
            raise FailedPreconditionError("The server core is closed")
        root = self._options.model_config_list_root_dir
        change = ConfigChange.of(self._config, config, root=root, check=self._check)
        for model in change.changed:
            warn_if_moved(self._config.model(model.name), model, self._monitor)
        labels = {name: v for name, v in self._labels.items() if name not in change.removed}
        # Labels change before models are added, as in TF Serving.
        self._labels = {**labels, **{m.name: dict(m.version_labels) for m in change.changed}}
        self._config = config = change.config
        self._known = {**self._known, **{m.name: m for m in config.models}}
        with self._lock:
            for name in change.removed:
                self._failed.pop(name, None)
        # States published before this reload (say, a re-added model's old END) do not count.
        on_demand, added = self._options.loads_on_demand, set(change.added)
        before: dict[str, Mapping[int, ServableStateAndTime]] = {  # on demand: not awaited
            model.name: self._monitor.get_version_states(model.name)
            for model in config.models
            if model.name in added and not on_demand(model)
        }
        self._pipeline.serve(config.models, change.changed, change.removed)
        return before

    def _check(self, model: ModelConfig) -> None:
        self._pipeline.check(model)
        check_labels(model, self._options, self._monitor, self._labels.get(model.name, {}))

    def _abandoned(self, name: str) -> ServingError | None:
        """Why waiting for ``name`` is pointless now (closed, removed, nothing to load), or None."""
        if self._closed or self._draining:
            return UnavailableError(f"The server stopped before model {name} became available")
        model = self._config.model(name)
        if model is None:
            return FailedPreconditionError(
                f"Model {name} was removed from the config before it became available"
            )
        if self._monitor.storage_condition(name).holds_no_version:
            return NotFoundError(
                f"No versions of model {name} found under base path {model.base_path}; it "
                "stays configured and loads when a version appears"
            )
        return None


def _not_a_model_spec(where: str, value: object) -> TypeError:
    return wrong_type(
        f"ServerCore.{where}'s model_spec",
        "a ModelSpec (ModelSpec.latest(name), .specific(name, version) or .labeled(name, label)); "
        "a ServableRequest is what a manager's servable_handle() takes",
        value,
    )


def _registered_status(
    name: str, version: int | None, versions: tuple[int, ...], failure: ServingError | None
) -> ModelStatus:
    """A model registered, not loaded: each version END, with an error saying it loads on
    demand (and why its last load failed, if it did)."""
    if version is not None:
        if version not in versions:
            raise NotFoundError(f"Could not find version {version} of model {name}")
        versions = (version,)
    reason = f"Model {name} is not loaded: it loads on demand, on its first request"
    if failure is not None:
        reason += f" (its last load failed: {failure.message})"
    error = UnavailableError(reason)
    return ModelStatus(
        name,
        tuple(VersionStatus(v, ManagerState.END, error) for v in sorted(versions, reverse=True)),
    )


def _with_heal_hint(error: ServingError | None) -> ServingError | None:
    """A failed load's error, saying the version loads again when its files change."""
    if error is None or error.code is StatusCode.CANCELLED:
        return error
    return type(error)(f"{error.message} (it loads again when its files change)")
