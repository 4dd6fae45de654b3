"""ServingPipeline: the Source → router → adapters → manager a ServerCore serves through."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import final

import attrs

from servinglib.core.aspired_versions_manager import AspiredVersionsManager
from servinglib.core.clock import Clock
from servinglib.core.event_bus import EventBus
from servinglib.core.loader import Loader
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
from servinglib.sources.remote_mirror import StoreEvent
from servinglib.sources.remote_store import check_installed
from servinglib.sources.source import StoragePath
from servinglib.sources.source_adapter import ErrorInjectingSourceAdapter
from servinglib.sources.source_router import DynamicSourceRouter
from servinglib.sources.storage_path_source_config import ServableToMonitor
from servinglib.sources.target import connect
from servinglib.sources.version_check import VersionCheck


@final
class ServingPipeline:
    """Models' base paths in, servables out: built from a ServerCore's options and registry.

    A :class:`BasePathSource` (each model's base path, local or remote) → a
    router by platform → one adapter per registered platform (→ batching,
    with ``batching_parameters``) → the AspiredVersionsManager, which
    publishes on :attr:`event_bus`; the :attr:`monitor` follows those states
    and the source's storage conditions, and tells the source which versions
    are still in use (so their remote copies stay).  Nothing polls until
    :meth:`start`.  Thread-safe, but :meth:`serve` calls must not overlap
    (ServerCore makes them under its reload lock).
    """

    def __init__(
        self, options: ServerCoreOptions, registry: PlatformRegistry, clock: Clock | None
    ) -> None:
        self._options = options
        self.event_bus: EventBus[ServableState] = EventBus()
        """Where the manager publishes every version's lifecycle events."""
        self.source = BasePathSource(options.source, clock=clock, in_use=self._versions_in_use)
        """The source of every model's aspired versions."""
        self.monitor = ServableStateMonitor(
            self.event_bus,
            storage=self.source.storage_conditions,
            max_count_log_events=1000,
            clock=clock,
        )
        """The states of every version, and the storage condition of every model."""
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
        self.batching: ModelBatching | None = None
        """The batching stage; None without ``batching_parameters``."""
        if options.batching_parameters is not None:
            self.batching = ModelBatching(
                options.batching_parameters, per_model=options.enable_per_model_batching_parameters
            )
            connect(self.batching, self.manager)
        self._router, self._ports, self._version_checks = self._connect_platforms(registry)
        self._routes: dict[str, int] = {}  # guarded by: serve's callers
        self._watched: dict[str, ServableToMonitor] = {}  # guarded by: serve's callers

    @property
    def platforms(self) -> list[str]:
        """The platforms models may name, sorted."""
        return sorted(self._ports)

    @property
    def store_events(self) -> EventBus[StoreEvent]:
        """What the object stores of remote base paths did: downloads, failed listings."""
        return self.source.store_events

    def start(self) -> None:
        """Connects the source: its polls begin (call once)."""
        connect(self.source, self._router)

    def check(self, model: ModelConfig) -> None:
        """Raises InvalidArgumentError if ``model``'s platform is unknown or its store's extra
        is not installed."""
        if model.model_platform not in self._ports:
            raise InvalidArgumentError(
                f"Model {model.name} requested unsupported platform "
                f"'{model.model_platform}'; known platforms: {', '.join(self.platforms)}"
            )
        check_installed(model.base_path)  # a remote store's extra: one line naming it

    def serve(
        self, models: Sequence[ModelConfig], changed: Iterable[ModelConfig], removed: Iterable[str]
    ) -> None:
        """Watches ``models`` from now on: ``changed`` ones (new or changed) are routed to their
        platform and polled before this returns, ``removed`` ones unload."""
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
                self._version_checks[model.model_platform],
                model.storage_options,
            )
        self._router.update_routes(routes)
        self._routes = routes
        servables = [self._watched[m.name] for m in models]
        self.source.update_config(attrs.evolve(self._options.source, servables=servables))

    def close(self) -> None:
        """Stops the source, unloads every version (waiting for handles), stops batching."""
        self.source.close()
        self.manager.close()
        if self.batching is not None:
            self.batching.close()
        self.monitor.close()

    def _versions_in_use(self, name: str) -> set[int]:
        """The versions of ``name`` the manager holds and has not ended: their files stay."""
        states = self.monitor.get_version_states(name)
        return {v for v, s in states.items() if s.state.manager_state is not ManagerState.END}

    def _connect_platforms(
        self, registry: PlatformRegistry
    ) -> tuple[DynamicSourceRouter[StoragePath], dict[str, int], dict[str, VersionCheck]]:
        """One adapter per known platform, each on its own router port."""
        platforms = registry.names()
        router: DynamicSourceRouter[StoragePath] = DynamicSourceRouter(len(platforms) + 1)
        ports, checks = {}, {}
        below = self.batching if self.batching is not None else self.manager
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
