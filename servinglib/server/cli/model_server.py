"""ModelServer: what ``servinglib-server`` runs — a ServerCore behind REST and gRPC on one loop."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, final

import attrs

from servinglib.batching.options import BatchingParameters, read_batching_parameters
from servinglib.codecs.limits import DecodeLimits
from servinglib.core.availability_preserving_policy import AvailabilityPreservingPolicy
from servinglib.core.basic_manager import ManagerOptions
from servinglib.core.loader_harness import LoadRetryOptions
from servinglib.core.resource_preserving_policy import ResourcePreservingPolicy
from servinglib.core.servable_state import ManagerState, ServableState
from servinglib.errors import ServingError, UnavailableError
from servinglib.examples import HALF_PLUS_TWO, PYTHON_HALF_PLUS_TWO
from servinglib.loaders.python import PythonPlatformConfig
from servinglib.loaders.tensorflow.config import TensorFlowPlatformConfig
from servinglib.loaders.warmup import WarmupOptions
from servinglib.server.auth import ApiGroup, RestrictedApis
from servinglib.server.cli.example_request import try_command
from servinglib.server.cli.file_budget import FileBudget, raise_open_file_limit
from servinglib.server.cli.flags import ServerFlags, usable_cores
from servinglib.server.cli.heap_freezer import HeapFreezer
from servinglib.server.cli.load_switch_interval import LoadSwitchInterval
from servinglib.server.cli.memory_trimmer import MemoryTrimmer, allocate_runtimes_through_malloc
from servinglib.server.cli.model_platform import flag_model
from servinglib.server.cli.monitoring_config import PrometheusConfig, read_monitoring_config
from servinglib.server.cli.platform_config_file import read_platform_config_file
from servinglib.server.cli.ports import check_ports, grpc_channel_arguments
from servinglib.server.cli.repository_models import model_control, served_config, startup_models
from servinglib.server.cli.worker_identity import WorkerIdentity
from servinglib.server.config import ModelConfig, ModelServerConfig, read_model_server_config
from servinglib.server.config_file_watcher import ModelConfigFileWatcher
from servinglib.server.header_forwarding import HeaderForwarding
from servinglib.server.management.model_control import ModelControlMode
from servinglib.server.management.model_management import ModelManagement, ModelManagementOptions
from servinglib.server.observe.call_record import CallObserver, StreamObserverAdapter
from servinglib.server.observe.log_sink import FileRetention
from servinglib.server.observe.metrics import DEFAULT_METRICS_PATH, ServerMetrics
from servinglib.server.observe.request_logger import RequestLogOptions
from servinglib.server.observe.request_record import (
    RequestObserver,
    RequestRecord,
    record_request,
)
from servinglib.server.observe.stream_metrics import StreamMetrics, log_stream
from servinglib.server.observe.tracing import Tracing
from servinglib.server.observe.worker_metrics import WorkerMetrics
from servinglib.server.plane.data_plane import DataPlane
from servinglib.server.plane.response_cache_config import ResponseCacheConfig
from servinglib.server.plane.stream_limits import StreamLimits
from servinglib.server.repository_poller import RepositoryPoller
from servinglib.server.server_core import ServerCore
from servinglib.server.server_core_options import ServerCoreOptions
from servinglib.server.triton_repository import with_config_files
from servinglib.sources.file_system_storage_path_source import FileSystemStoragePathSourceConfig

_log = logging.getLogger("servinglib.server")
R = TypeVar("R")  # a record an observer takes

_REFREEZE_CHECK_S = 2.0  # how often the loop looks whether versions changed (see HeapFreezer)
_TRIM_CHECK_S = 1.0  # how often the RSS is read to decide on a trim (see MemoryTrimmer)

# After the grace: how long cut-off requests have to get their 503 out before the servers close.
_CUT_OFF_S = 1.0
# After drain delay + grace: how long the models have to unload before the process exits anyway.
_UNLOAD_S = 10.0

EXIT_CUT_OFF = 3
"""The exit status when the shutdown grace ended with requests or model calls cut off."""

# TF Serving's model server names its shared batch pool so, when no file names it.
_BATCH_THREAD_POOL = "model_server_batch_threads"


def serves_demo(flags: ServerFlags) -> bool:
    """Whether the bundled examples are served (--demo without model flags of one's own)."""
    return flags.demo and not (flags.model_config_file or flags.model_base_path)


def model_config(flags: ServerFlags) -> ModelServerConfig:
    """The models to serve: the bundled examples, the config file, or the one model of the flags
    (none with only ``--model_repository``), each with the ``config.pbtxt`` beside its versions.

    Relative paths of the flags are resolved against the working directory;
    the platform of ``--model_base_path``'s model is inferred unless given.
    """
    if flags.model_config_file:
        config = read_model_server_config(os.path.abspath(flags.model_config_file))
    elif serves_demo(flags):
        config = ModelServerConfig(
            [
                ModelConfig("half_plus_two", HALF_PLUS_TWO, "tensorflow"),
                ModelConfig("python_half_plus_two", PYTHON_HALF_PLUS_TWO, "python"),
            ]
        )
    elif flags.model_base_path:
        config = ModelServerConfig([flag_model(flags)])
    else:
        config = ModelServerConfig()
    return with_config_files(config)


def import_runtimes(config: ModelServerConfig, platforms: Mapping[str, Any]) -> None:
    """Imports what the models of ``config`` will need that is costly to import (TensorFlow).

    Not for a platform whose ``platforms`` config has ``model_process``: its
    versions load in processes of their own.
    """
    in_processes = getattr(platforms.get("tensorflow"), "model_process", False)
    if not in_processes and any(model.model_platform == "tensorflow" for model in config.models):
        from servinglib.loaders.tensorflow import import_tensorflow

        try:
            import_tensorflow()
        except ServingError:
            return  # missing: the models' loads say so, each with the install hint


def core_options(flags: ServerFlags) -> ServerCoreOptions:
    """ServerCoreOptions from the flags (TF Serving's meaning of each)."""
    iterations = flags.num_request_iterations_for_warmup or 1
    warmup = WarmupOptions(enabled=flags.enable_model_warmup, num_request_iterations=iterations)
    policy = (
        ResourcePreservingPolicy()
        if flags.aspired_version_policy == "resource"
        else AvailabilityPreservingPolicy()
    )
    return ServerCoreOptions(
        aspired_version_policy=policy,
        manager=ManagerOptions(
            num_load_threads=flags.num_load_threads,
            num_unload_threads=flags.num_unload_threads,
            load_retry=LoadRetryOptions(
                max_num_load_retries=flags.max_num_load_retries,
                load_retry_interval_s=max(0.0, flags.load_retry_interval_micros / 1e6),
            ),
        ),
        source=FileSystemStoragePathSourceConfig(
            file_system_poll_wait_seconds=flags.file_system_poll_wait_seconds,
            settle_window_s=flags.file_system_settle_window_seconds,
            version_done_marker=flags.version_done_marker or None,
            model_cache_dir=flags.model_cache_dir or None,
            download_concurrency=flags.model_download_concurrency,
        ),
        total_model_memory_limit_bytes=(
            flags.model_memory_budget
            if flags.model_memory_budget is not None
            else flags.total_model_memory_limit_bytes
        ),
        load_models_on_demand=flags.load_models_on_demand,
        ready_without_models=flags.model_control_mode == "explicit",
        pinned_models=flags.load_model if flags.load_models_on_demand else (),
        allow_version_labels_for_unavailable_models=flags.allow_version_labels_for_unavailable_models,
        platform_configs=platform_configs(flags, warmup),
        start_degraded=flags.start_degraded,
        max_requests_in_flight_per_model=flags.max_requests_in_flight_per_model,
        batching_parameters=batching_parameters(flags),
        enable_per_model_batching_parameters=per_model_batching(flags),
    )


def rest_tls(flags: ServerFlags) -> Any:  # noqa: ANN401 - RestTls, imported lazily with REST
    """The REST server's TLS files, or None for plain HTTP."""
    if not flags.rest_ssl_certfile:
        return None
    from servinglib.server.rest.tls import RestTls

    return RestTls(flags.rest_ssl_certfile, flags.rest_ssl_keyfile, flags.rest_ssl_ca_certs)


def header_forwarding(pattern: str, restricted: RestrictedApis) -> HeaderForwarding | None:
    """The forwarding of ``pattern`` (None when empty), withholding ``restricted``'s keys."""
    if not pattern:
        return None
    return HeaderForwarding(pattern, withheld=[r.key for r in restricted.restrictions])


def _inference_header(flags: ServerFlags) -> str:
    """The header REST inference needs (for the start-up example), or "" when it is open."""
    for restriction in RestrictedApis.http(flags.http_restricted_api).restrictions:
        if ApiGroup.INFERENCE in restriction.groups:
            return restriction.key
    return ""


def management_options(flags: ServerFlags) -> ModelManagementOptions:
    """Whether and where remote calls may load, unload and reload models."""
    return ModelManagementOptions(
        enabled=flags.allow_remote_model_management,
        allowed_roots=flags.model_management_roots or None,
        allow_python_models=flags.allow_remote_python_models,
    )


def platform_configs(flags: ServerFlags, warmup: WarmupOptions) -> dict[str, Any]:
    """Each platform's config: from the flags, replaced by ``--platform_config_file`` entries.

    The warmup flags apply to the built-in platforms either way.
    """
    intra = (
        flags.tensorflow_intra_op_parallelism
        or flags.tensorflow_session_parallelism
        or worker_intra_op_threads(flags)
    )
    inter = flags.tensorflow_inter_op_parallelism or flags.tensorflow_session_parallelism
    tags = [t.strip() for t in flags.saved_model_tags.split(",") if t.strip()]
    configs: dict[str, Any] = {
        "tensorflow": TensorFlowPlatformConfig(tags, intra, inter, warmup),
        "python": PythonPlatformConfig(
            # The bundled Python model ships with servinglib: running it is safe to allow.
            allow_code_execution=flags.allow_python_code_execution or serves_demo(flags),
            warmup=warmup,
        ),
    }
    if flags.platform_config_file:
        for name, config in read_platform_config_file(flags.platform_config_file).items():
            builtin = isinstance(config, TensorFlowPlatformConfig | PythonPlatformConfig)
            configs[name] = attrs.evolve(config, warmup=warmup) if builtin else config
    return configs


def request_log_options(flags: ServerFlags) -> RequestLogOptions:
    """The request log's bounds the flags set (the queue's bytes, the files kept)."""
    return RequestLogOptions(
        max_queued_bytes=flags.request_log_max_queued_bytes,
        file_retention=FileRetention(
            max_files=flags.request_log_max_files,
            max_total_bytes=flags.request_log_max_total_bytes,
        ),
    )


def stream_limits(flags: ServerFlags) -> StreamLimits:
    """The streams' bounds the flags set (buffered bytes, streams per model, idle timeout)."""
    return StreamLimits(
        max_buffered_bytes=flags.stream_max_buffered_bytes,
        max_streams_per_model=flags.max_streams_per_model,
        idle_timeout_s=flags.stream_idle_timeout_seconds,
    )


def worker_intra_op_threads(flags: ServerFlags) -> int:
    """TensorFlow's intra-op threads of each of ``--num_workers`` workers: the cores shared out.

    0 (TensorFlow's own choice, every core) for a single process.
    """
    if flags.num_workers <= 1:
        return 0
    return max(1, usable_cores() // flags.num_workers)


def batching_parameters(flags: ServerFlags) -> BatchingParameters | None:
    """The batching file's parameters (TF's defaults without a file); None without batching.

    With ``--model_repository`` batching is on without ``--enable_batching``, each model
    batched as it says itself (see :func:`per_model_batching`).
    """
    if not flags.enable_batching and not flags.model_repository:
        return None
    defaults = BatchingParameters(thread_pool_name=_BATCH_THREAD_POOL)
    if not flags.batching_parameters_file:
        return defaults
    return read_batching_parameters(flags.batching_parameters_file, defaults=defaults)


def per_model_batching(flags: ServerFlags) -> bool:
    """Whether each model is batched only as it says (its config.pbtxt's ``dynamic_batching``,
    or its version's ``batching_params.pbtxt``): asked for, or a model repository served
    without ``--enable_batching``."""
    return flags.enable_per_model_batching_parameters or (
        bool(flags.model_repository) and not flags.enable_batching
    )


def decode_limits(flags: ServerFlags) -> DecodeLimits:
    """The bounds of request tensors: the defaults, with ``--max_tensor_fill_bytes``."""
    return DecodeLimits(max_fill_bytes=flags.max_tensor_fill_bytes)


def prometheus_config(flags: ServerFlags) -> PrometheusConfig:
    """Whether and where to serve metrics: the monitoring file, or --enable_metrics."""
    if flags.monitoring_config_file:
        config = read_monitoring_config(flags.monitoring_config_file)
        if config.enable or not flags.enable_metrics:
            return config
    return PrometheusConfig(flags.enable_metrics, DEFAULT_METRICS_PATH)


@final
class ModelServer:
    """The server process: builds everything from the flags, serves until a signal.

    Construction checks the ports are free, then loads the models (raising
    the error if the start fails);
    :meth:`run` serves until SIGTERM/SIGINT or :meth:`request_stop`.
    A worker of ``--num_workers`` (``worker`` given) shares its ports with
    the other workers (its supervisor checked them), publishes its metrics
    for them, and tells its supervisor once it serves.
    Thread safety: :meth:`request_stop` may be called from any thread.
    """

    def __init__(self, flags: ServerFlags, worker: WorkerIdentity | None = None) -> None:
        if worker is None:
            check_ports(flags)
        raise_open_file_limit()  # before the models load: they share it with the connections
        if flags.malloc_trim:
            allocate_runtimes_through_malloc()  # before a runtime is imported: see MemoryTrimmer
        self.flags = flags
        self.worker = worker
        prometheus = prometheus_config(flags)
        self.metrics = ServerMetrics() if prometheus.enable else None
        self.worker_metrics: WorkerMetrics | None = None
        if self.metrics is not None and worker is not None:
            self.worker_metrics = self.metrics.share_with_workers(worker.directory, worker.index)
        self.metrics_path = prometheus.path
        self.freezer = HeapFreezer() if flags.freeze_heap else None
        # ServerCore logs states itself; loads and unloads shorten the GIL's switch interval.
        listeners: list[Callable[[ServableState], None]] = [LoadSwitchInterval().on_state]
        # Before the models load: a missing tracing extra fails the start at once.
        self.tracing = Tracing.from_environment() if flags.enable_tracing else None
        self.control = model_control(flags)
        self.config = model_config(flags)
        if self.control is not None:
            repository = self.control.repository
            self.config = repository.with_models(self.config, startup_models(flags, repository))
        options = core_options(flags)
        if self.freezer is not None:
            listeners.append(self.freezer.on_state)
            # Frozen before the models load, so that unloading them never needs a whole-heap
            # collection (see HeapFreezer); their platforms' runtimes first, to freeze those too.
            import_runtimes(self.config, options.platform_configs)
            self.freezer.freeze()
        self.core = ServerCore(self.config, options, state_listeners=listeners)
        if self.metrics is not None:
            self.metrics.attach(self.core)
        self.plane = DataPlane(
            self.core,
            max_calls_per_model=flags.max_pool_calls_per_model or None,
            observers=self._call_observers(),
            request_log=request_log_options(flags),
            tracing=self.tracing,
            show_paths_in_errors=flags.show_paths_in_errors,
            streams=stream_limits(flags),
            response_cache=(
                ResponseCacheConfig.parse(flags.cache_config) if flags.cache_config else None
            ),
        )
        if self.metrics is not None:
            self.metrics.attach_plane(self.plane)
        self.management = ModelManagement(self.core, management_options(flags), self.control)
        # Made once the models are loaded: its floor is the RSS serving them.
        self.trimmer = MemoryTrimmer() if flags.malloc_trim else None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._signals = 0
        self._watcher: ModelConfigFileWatcher | None = None
        self._poller: RepositoryPoller | None = None
        self.rest_port: int | None = None
        self.grpc_port: int | None = None

    def run(self) -> int:
        """Serves until stopped; the exit status (0 after a graceful stop, else EXIT_CUT_OFF).

        Model calls still running after the grace are left to their threads
        (a thread cannot be stopped): the models are then not unloaded and
        the caller should end the process (``os._exit``) rather than wait.
        """
        status = 1
        try:
            status = _run(self._serve())
        finally:
            if self.worker_metrics is not None:
                self.worker_metrics.close()  # its last counts, for the worker replacing it
            if self.tracing is not None:
                self.tracing.shutdown()  # exports the spans still buffered
            if self.plane.running_calls():
                status = EXIT_CUT_OFF
            else:
                self.plane.close()
                self.core.close()
        return status

    @property
    def abandoned_calls(self) -> bool:
        """True when model calls still run (after :meth:`run`: they were left behind)."""
        return bool(self.plane.running_calls())

    def request_stop(self) -> None:
        """Starts the graceful stop, as SIGTERM does."""
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            loop.call_soon_threadsafe(stop.set)

    async def _serve(self) -> int:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        budget = self._file_budget()
        rest = self._make_rest(budget)
        grpc_server = await self._make_grpc(budget)
        watcher = self._make_watcher()
        poller = self._make_poller()
        rest_task = asyncio.create_task(rest.serve()) if rest is not None else None
        if grpc_server is not None:
            await grpc_server.start()
        self._install_signal_handlers()
        freezing = None
        if self.freezer is not None:
            self.freezer.refreeze_if_changed()  # before serving: may freeze what the loads grew
            freezing = asyncio.create_task(self._refreeze_after_changes(self.freezer))
        trimming = None
        if self.trimmer is not None and self.trimmer.available:
            trimming = asyncio.create_task(self._trim_after_growth(self.trimmer))
        self._announce()
        if self.worker is not None:
            self.worker.announce_ready()
        await self._stop.wait()
        _start_exit_timer(
            self.flags.drain_delay_seconds + self.flags.shutdown_grace_seconds, self._in_progress
        )
        for task in (freezing, trimming):
            if task is not None:
                task.cancel()
        _log.info(
            "Stopping: not ready any more; serving %.1f s more", self.flags.drain_delay_seconds
        )
        self.core.drain()  # also ends the waits of reloads in progress
        if grpc_server is not None:
            grpc_server.set_not_serving()
        if self.flags.drain_delay_seconds > 0:
            await asyncio.sleep(self.flags.drain_delay_seconds)
        self.plane.drain()  # what is left to run may use the whole pool
        cut_off = await self._stop_servers(rest, rest_task, grpc_server)
        for changes in (watcher, poller):
            if changes is not None:
                changes.close()
        if cut_off:
            return EXIT_CUT_OFF
        _log.info("Unloading models")
        return 0

    def _in_progress(self) -> str:
        """What a shutdown may be waiting for: model calls, loads and unloads, and the model
        stores' listings and downloads (for the log)."""
        parts = [f"{c.site} running for {c.running_s:.1f} s" for c in self.plane.running_calls()]
        parts += self.core.store_work()
        for name, versions in sorted(self.core.monitor.get_live_servable_states().items()):
            for version, entry in sorted(versions.items()):
                state = entry.state.manager_state
                if state in {ManagerState.LOADING, ManagerState.UNLOADING}:
                    parts.append(f"{name} v{version} {state.value.lower()}")
        return "; ".join(parts) or "nothing known"

    async def _stop_servers(self, rest: Any, rest_task: Any, grpc_server: Any) -> bool:  # noqa: ANN401 - RestServer, its task, GrpcServer
        """Refuses new connections, lets requests finish within the grace; True if some were cut."""
        grace = self.flags.shutdown_grace_seconds
        _log.info("Refusing new connections; requests in flight have %.1f s to finish", grace)
        stops: list[asyncio.Future[Any]] = []
        if rest is not None:
            rest.stop(timeout_s=0)
            if rest_task is not None:
                stops.append(rest_task)
        if grpc_server is not None:
            stops.append(asyncio.ensure_future(grpc_server.stop(grace + _CUT_OFF_S)))
        if not stops:
            return False
        _, pending = await asyncio.wait(stops, timeout=grace)
        if not pending:
            return False
        cut = self.plane.cut_off(
            UnavailableError("The server is shutting down: the request was cut off")
        )
        _log.error(
            "Shutdown grace of %.1f s over: requests still in flight are cut off (503 / "
            "UNAVAILABLE)%s",
            grace,
            "".join(
                f"; {c.site} still running after {c.running_s:.1f} s"
                + (" (past its deadline)" if c.overdue else "")
                for c in cut
            ),
        )
        await asyncio.wait(pending, timeout=_CUT_OFF_S + 1)
        return True

    async def _refreeze_after_changes(self, freezer: HeapFreezer) -> None:
        while True:
            await asyncio.sleep(_REFREEZE_CHECK_S)
            freezer.refreeze_if_changed()

    async def _trim_after_growth(self, trimmer: MemoryTrimmer) -> None:
        while True:
            await asyncio.sleep(_TRIM_CHECK_S)
            await asyncio.to_thread(trimmer.trim_if_grown)

    def _file_budget(self) -> FileBudget:
        """The open-file limit's split between the front ends' connections and the rest."""
        flags = self.flags
        budget = FileBudget.of_this_process(
            flags.rest_api_max_connections if flags.rest_api_port else 0,
            flags.grpc_max_connections if flags.port or flags.grpc_socket_path else 0,
        )
        _log.info("%s", budget.describe())
        return budget

    def _make_rest(self, budget: FileBudget) -> Any:  # noqa: ANN401 - RestServer, imported lazily
        flags = self.flags
        if not flags.rest_api_port:
            return None
        from servinglib.server.rest import HttpLimits, RestOptions, RestServer, create_app
        from servinglib.server.rest.metrics_endpoint import MetricsEndpoint

        options = RestOptions(
            request_timeout_s=flags.rest_api_timeout_in_ms / 1e3,
            enable_cors_support=flags.rest_api_enable_cors_support,
            decode_limits=decode_limits(flags),
            restricted_apis=RestrictedApis.http(flags.http_restricted_api),
            header_forwarding=header_forwarding(
                flags.http_header_forward_pattern, RestrictedApis.http(flags.http_restricted_api)
            ),
        )
        app: Any = create_app(
            self.plane, options, on_request=self._request_observer(), management=self.management
        )
        if self.metrics is not None:
            paths = {self.metrics_path, DEFAULT_METRICS_PATH, "/metrics"}
            app = MetricsEndpoint(app, self.metrics, paths, options.restricted_apis)
        server = RestServer(
            app,
            flags.rest_api_host,
            flags.rest_api_port,
            # Past the grace the plane cuts requests off first (a JSON 503), then uvicorn cancels.
            graceful_timeout_s=flags.shutdown_grace_seconds + _CUT_OFF_S,
            limits=HttpLimits(
                max_header_bytes=flags.rest_api_max_header_bytes,
                idle_timeout_s=flags.rest_api_idle_timeout_seconds,
                request_read_timeout_s=flags.rest_api_request_read_timeout_seconds,
                max_connections=budget.rest_connections,
            ),
            reuse_port=self.worker is not None,
            tls=rest_tls(flags),
        )
        self.rest_port = server.port
        return server

    async def _make_grpc(self, budget: FileBudget) -> Any:  # noqa: ANN401 - GrpcServer, imported lazily
        flags = self.flags
        if not flags.port and not flags.grpc_socket_path:
            return None
        from servinglib.server.grpc import GrpcServerOptions, SslConfig, create_server

        options = GrpcServerOptions(
            host=flags.grpc_host,
            port=flags.port,
            unix_socket_path=flags.grpc_socket_path or None,
            channel_arguments=grpc_channel_arguments(flags, share_port=self.worker is not None),
            ssl=SslConfig.read(flags.ssl_config_file) if flags.ssl_config_file else None,
            grace_period_s=flags.shutdown_grace_seconds,
            tensor_content_responses=flags.enable_serialization_as_tensor_content,
            decode_limits=decode_limits(flags),
            server=flags.grpc_server,
            max_threads=flags.grpc_max_threads,
            max_connections=budget.grpc_connections,
            restricted_apis=RestrictedApis.grpc(flags.grpc_restricted_protocol),
            header_forwarding=header_forwarding(
                flags.grpc_header_forward_pattern,
                RestrictedApis.grpc(flags.grpc_restricted_protocol),
            ),
        )
        server, port = create_server(
            self.plane, options, management=self.management, on_request=self._request_observer()
        )
        self.grpc_port = port if flags.port else None
        return server

    def _request_observer(self) -> RequestObserver | None:
        """What both front ends report each request to: the metrics, the request log."""
        observers: list[RequestObserver] = []
        if self.metrics is not None:
            observers.append(record_request(self.metrics))
        if self.flags.log_requests:
            observers.append(_log_request)
        return _each_of(observers)

    def _call_observers(self) -> list[CallObserver]:
        """What each finished call is reported to beyond the plane's own: the stream metrics,
        the request log's line per stream."""
        observers: list[CallObserver] = []
        if self.metrics is not None:
            observers.append(StreamMetrics(self.metrics))
        if self.flags.log_requests:
            observers.append(StreamObserverAdapter(log_stream))
        return observers

    def _make_watcher(self) -> ModelConfigFileWatcher | None:
        flags = self.flags
        if not flags.model_config_file or flags.model_config_file_poll_wait_seconds <= 0:
            return None
        self._watcher = ModelConfigFileWatcher(
            self.core,
            flags.model_config_file,
            flags.model_config_file_poll_wait_seconds,
            compose=self._served_config,
        )
        return self._watcher

    def _make_poller(self) -> RepositoryPoller | None:
        control = self.control
        if control is None or control.mode is not ModelControlMode.POLL:
            return None
        self._poller = RepositoryPoller(
            self.core, control.repository, self.flags.repository_poll_secs
        )
        return self._poller

    def _served_config(
        self, file_config: ModelServerConfig, served: ModelServerConfig
    ) -> ModelServerConfig:
        return served_config(file_config, served, self.control)

    def _install_signal_handlers(self) -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._on_signal, signum)
        loop.add_signal_handler(signal.SIGHUP, self._on_hangup)

    def _on_hangup(self) -> None:
        """SIGHUP: re-read the model config file on a thread (a reload waits for its models)."""
        path = self.flags.model_config_file
        if not path:
            _log.info("SIGHUP received: no --model_config_file, nothing to reload")
            return
        if self.core.draining:
            _log.info("SIGHUP received while stopping: not reloading %s", path)
            return
        _log.info("SIGHUP received: re-reading %s", path)
        threading.Thread(
            target=self._reload_config_file, name="servinglib-sighup-reload", daemon=True
        ).start()

    def _reload_config_file(self) -> None:
        watcher, path = self._watcher, self.flags.model_config_file
        if watcher is not None:
            if not watcher.check_once() and watcher.status().error is None:
                _log.info("model config file %s unchanged", path)
            return  # the watcher logged what it applied or why not
        try:
            file_config = read_model_server_config(path)
            self.core.update_config(lambda served: self._served_config(file_config, served))
        except ServingError as error:
            _log.error("model config file %s not applied: %s", path, error.message)
        else:
            _log.info("applied model config file %s", path)

    def _on_signal(self, signum: int) -> None:
        self._signals += 1
        if self._signals > 1:
            _log.warning("Second %s: exiting now", signal.Signals(signum).name)
            os._exit(1)
        _log.info("%s received", signal.Signals(signum).name)
        assert self._stop is not None  # set before handlers are installed
        self._stop.set()

    def _announce(self) -> None:
        names = ", ".join(self.core.list_models()) or "none"
        if self.grpc_port is not None:
            _log.info("gRPC on %s:%d", self.flags.grpc_host, self.grpc_port)
        if self.flags.grpc_socket_path:
            _log.info("gRPC on unix:%s", self.flags.grpc_socket_path)
        if self.rest_port is not None:
            scheme = "https" if self.flags.rest_ssl_certfile else "http"
            _log.info("REST on %s://%s:%d", scheme, self.flags.rest_api_host, self.rest_port)
            if self.metrics is not None:
                _log.info(
                    "Prometheus metrics on %s://%s:%d%s",
                    scheme,
                    self.flags.rest_api_host,
                    self.rest_port,
                    self.metrics_path,
                )
        _log.info("Serving models: %s", names)
        if self.rest_port is not None:
            command = try_command(
                self.core,
                self.flags.rest_api_host,
                self.rest_port,
                scheme="https" if self.flags.rest_ssl_certfile else "http",
                header=_inference_header(self.flags),
            )
            if command is not None:
                _log.info("Try: %s", command)


_requests_log = logging.getLogger("servinglib.requests")


def _each_of(observers: list[Callable[[R], None]]) -> Callable[[R], None] | None:
    """One observer calling each of ``observers`` in order (None: none; itself: one)."""
    if len(observers) <= 1:
        return observers[0] if observers else None

    def observe(record: R) -> None:
        for observer in observers:
            observer(record)

    return observe


def _log_request(record: RequestRecord) -> None:
    """One access-log line per request, in each protocol's terms (as fields in JSON lines)."""
    fields = {
        "model": record.model_name or None,
        "entrypoint": record.entrypoint,
        "api": record.api,
        "code": record.code.name,
        "latency_ms": round(record.latency_s * 1e3, 3),
    }
    if record.service:  # gRPC
        _requests_log.info(
            "GRPC %s %s/%s %s %.2f ms",
            record.model_name or "-",
            record.service,
            record.method,
            record.code.name,
            record.latency_s * 1e3,
            extra={**fields, "method": f"{record.service}/{record.method}"},
        )
    else:
        _requests_log.info(
            "REST %s %s %d %.2f ms",
            record.model_name or "-",
            record.api,
            record.status,
            record.latency_s * 1e3,
            extra={**fields, "status": record.status},
        )


def _start_exit_timer(stop_s: float, in_progress: Callable[[], str]) -> None:
    """Ends the process ``stop_s`` + unload time from now if the graceful stop has not.

    The last resort behind the stop sequence (a load or unload that hangs, a
    thread that will not end): a shutdown always ends.
    """
    limit_s = stop_s + _CUT_OFF_S + _UNLOAD_S

    def force_exit() -> None:
        _log.error(
            "Shutdown did not finish within %.1f s: exiting now; in progress: %s",
            limit_s,
            in_progress(),
        )
        logging.shutdown()
        os._exit(EXIT_CUT_OFF)

    timer = threading.Timer(limit_s, force_exit)
    timer.name = "servinglib-exit-timer"
    timer.daemon = True
    timer.start()


def _run(coroutine: Any) -> int:  # noqa: ANN401 - a coroutine returning the exit status
    try:
        import uvloop
    except ImportError:
        return int(asyncio.run(coroutine))
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return int(runner.run(coroutine))
