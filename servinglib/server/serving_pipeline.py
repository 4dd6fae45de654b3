"""ServingPipeline: the Source → router → adapters → manager a ServerCore serves through."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Sequence
from typing import final

import attrs

from servinglib.batching.options import BatchingParameters
from servinglib.core.aspired_versions_manager import AspiredVersionsManager
from servinglib.core.clock import Clock
from servinglib.core.event_bus import EventBus
from servinglib.core.loader import Loader
from servinglib.core.on_demand_loads import OnDemandLoads
from servinglib.core.resource_tracker import ResourceTracker
from servinglib.core.resources import ResourceAllocation
from servinglib.core.servable_state import ManagerState, ServableState
from servinglib.core.servable_state_monitor import ServableStateMonitor
from servinglib.errors import InvalidArgumentError
from servinglib.loaders.model_batching import ModelBatching
from servinglib.loaders.registry import PlatformRegistry
from servinglib.server.config import ModelConfig
from servinglib.server.server_core_options import ServerCoreOptions
from servinglib.sources.base_path_source import BasePathSource
from servinglib.sources.model_file_adapter import ModelFileAdapter, check_inside
from servinglib.sources.remote_store import check_installed
from servinglib.sources.source import StoragePath
from servinglib.sources.source_adapter import ErrorInjectingSourceAdapter
from servinglib.sources.source_router import DynamicSourceRouter
from servinglib.sources.storage_path_source_config import ServableToMonitor
from servinglib.sources.target import connect
from servinglib.sources.version_check import VersionCheck

_log = logging.getLogger("servinglib.server.server_core")  # what ServerCore.close() logs
_NOT_ENDED = tuple(set(ManagerState) - {ManagerState.END})  # a version whose files stay


@final
class ServingPipeline:
    """Models' base paths in, servables out: built from a ServerCore's options and registry.

    A :class:`BasePathSource` → each version's model file (a model's
    ``model_filename``, see :class:`ModelFileAdapter`) → a router by platform → one adapter per
    platform (→ batching) → :attr:`on_demand` (which holds back models loaded on demand until
    a request names them) → the AspiredVersionsManager, publishing on
    :attr:`event_bus`, which :attr:`monitor` follows.  Nothing polls until
    :meth:`start`.  Raises InvalidArgumentError for
    ``enable_per_model_batching_parameters`` without ``batching_parameters``.
    Thread-safe, but :meth:`serve` calls must not overlap.
    """

    def __init__(
        self, options: ServerCoreOptions, registry: PlatformRegistry, clock: Clock | None
    ) -> None:
        if options.enable_per_model_batching_parameters and options.batching_parameters is None:
            raise InvalidArgumentError(
                "enable_per_model_batching_parameters needs batching_parameters (batching on)"
            )
        self._options = options
        self._lock = threading.Lock()
        self._closer: threading.Thread | None = None  # guarded by: _lock
        self._close_error: BaseException | None = None  # set by the closer thread
        self.event_bus: EventBus[ServableState] = EventBus()
        self.source = BasePathSource(options.source, clock=clock, in_use=self._versions_in_use)
        self.monitor = ServableStateMonitor(
            self.event_bus,
            storage=self.source.storage_conditions,
            max_count_log_events=1000,
            clock=clock,
        )
        limit = options.total_model_memory_limit_bytes
        self.manager = AspiredVersionsManager(
            options.aspired_version_policy,
            options.manager,
            manage_state_interval_s=options.manage_state_interval_s,
            enable_reload_servables_with_error=options.enable_reload_servables_with_error,
            resource_tracker=(
                ResourceTracker(ResourceAllocation.ram_bytes(limit)) if limit is not None else None
            ),
            event_bus=self.event_bus,
            clock=clock,
        )
        self.on_demand = OnDemandLoads(
            self.manager.aspired_versions_callback(), self.event_bus, budget_bytes=limit
        )
        self.batching: ModelBatching | None = None  # None without batching_parameters
        if options.batching_parameters is not None:
            self.batching = ModelBatching(
                options.batching_parameters, per_model=options.enable_per_model_batching_parameters
            )
            connect(self.batching, self.on_demand)
        self._model_files = ModelFileAdapter()
        self._router, self._ports, self._version_checks = self._connect_platforms(registry)
        connect(self._model_files, self._router)
        self._routes: dict[str, int] = {}  # guarded by: serve's callers
        self._watched: dict[str, ServableToMonitor] = {}  # guarded by: serve's callers

    def start(self) -> None:
        """Connects the source: its polls begin (call once)."""
        connect(self.source, self._model_files)

    def check(self, model: ModelConfig) -> None:
        """Raises InvalidArgumentError if ``model``'s platform is unknown or its store's extra
        is not installed."""
        if model.model_platform not in self._ports:
            raise InvalidArgumentError(
                f"Model {model.name} requested unsupported platform "
                f"'{model.model_platform}'; known platforms: {', '.join(sorted(self._ports))}"
            )
        check_installed(model.base_path)  # a remote store's extra: one line naming it

    def serve(
        self, models: Sequence[ModelConfig], changed: Iterable[ModelConfig], removed: Iterable[str]
    ) -> None:
        """Watches ``models`` from now on: ``changed`` ones (new or changed) are routed to their
        platform and polled before this returns, ``removed`` ones unload."""
        changed = list(changed)
        routes = dict(self._routes)
        for name in removed:
            routes.pop(name, None)
            self._watched.pop(name, None)
        for model in changed:
            routes[model.name] = self._ports[model.model_platform]
            self._watched[model.name] = ServableToMonitor(
                model.name,
                model.base_path,
                model.version_policy,
                check_inside(self._version_checks[model.model_platform], model.model_filename),
                model.storage_options,
            )
        self._router.update_routes(routes)
        self._routes = routes
        self._model_files.update({m.name: m.model_filename for m in models})
        own = _own_batching(models)
        if self.batching is not None:
            self.batching.update_models(own)
        elif unbatched := sorted(own.keys() & {m.name for m in changed}):
            _log.warning(
                "Model %s: dynamic_batching has no effect: batching is off "
                "(ServerCoreOptions.batching_parameters)",
                ", ".join(unbatched),
            )
        on_demand = self._options.loads_on_demand
        self.on_demand.configure({m.name: on_demand(m) for m in models})
        servables = [self._watched[m.name] for m in models]
        self.source.update_config(attrs.evolve(self._options.source, servables=servables))

    def close(self, timeout_s: float | None = None) -> bool:
        """Stops the source, unloads every version (waiting for handles), stops batching; True
        once done.  Idempotent.

        It is done on a thread of its own, waited for up to ``timeout_s``:
        past it, the handles still held are logged and False returned, the
        unloading going on in the background (calling again waits again).
        What closing raised is raised here.
        """
        with self._lock:
            if self._closer is None:
                self._closer = threading.Thread(
                    target=self._close_all, name="servinglib-close", daemon=True
                )
                self._closer.start()
            closer = self._closer
        closer.join(timeout_s)
        if closer.is_alive():
            held = self.manager.basic_manager.held_handles()
            listed = ", ".join(
                f"{servable_id} ({count} handle(s), {waited_s:.1f} s)"
                for servable_id, (count, waited_s) in sorted(held.items())
            )
            _log.warning(
                "ServerCore.close() returns after %g s; unloading goes on in the background, "
                "waiting for handles still held: %s",
                timeout_s,
                listed or "none (an unload or a load is still running)",
            )
            return False
        if self._close_error is not None:
            raise self._close_error
        return True

    def _close_all(self) -> None:
        try:
            self.source.close()
            self.manager.close()
            if self.batching is not None:
                self.batching.close()
            self.monitor.close()
        except BaseException as error:  # noqa: BLE001 - raised again by close() on the caller's thread
            self._close_error = error

    def _versions_in_use(self, name: str) -> set[int]:
        """The versions of ``name`` the manager holds and has not ended: their files stay."""
        return self.monitor.versions_in(name, *_NOT_ENDED)

    def _connect_platforms(
        self, registry: PlatformRegistry
    ) -> tuple[DynamicSourceRouter[StoragePath], dict[str, int], dict[str, VersionCheck]]:
        """One adapter per known platform, each on its own router port."""
        platforms = registry.names()
        router: DynamicSourceRouter[StoragePath] = DynamicSourceRouter(len(platforms) + 1)
        ports, checks = {}, {}
        below = self.batching if self.batching is not None else self.on_demand
        for port, platform in enumerate(platforms):
            platform_config = self._options.platform_configs.get(platform)
            adapter = registry.make_adapter(platform, platform_config)
            checks[platform] = registry.version_check(platform, platform_config)
            connect(router.output_ports[port], adapter)
            connect(adapter, below)
            ports[platform] = port
        # Unreachable: configs naming unknown platforms are rejected; kept for safety.
        unknown: ErrorInjectingSourceAdapter[StoragePath, Loader] = ErrorInjectingSourceAdapter(
            InvalidArgumentError("This model's platform is not routed")
        )
        connect(router.output_ports[len(platforms)], unknown)
        connect(unknown, self.manager)
        return router, ports, checks


def _own_batching(models: Sequence[ModelConfig]) -> dict[str, BatchingParameters]:
    """The models whose Triton config sets ``dynamic_batching``, with its parameters; but
    Python-backend models, which batch their requests themselves (their ``execute`` takes
    the list)."""
    own: dict[str, BatchingParameters] = {}
    for model in models:
        config = model.triton_config
        if config is not None and config.message.backend != "python":
            # Here, not at the top: a Triton config imports protobuf, `import servinglib` does not.
            from servinglib.loaders.triton.config import batching_parameters

            parameters = batching_parameters(config)
            if parameters is not None:
                own[model.name] = parameters
    return own
