"""create_server: the gRPC server with every servicer, and GrpcServer, its lifecycle.

Two servers run the same servicers: grpcio's synchronous server (the
default, ``GrpcServerOptions.server="sync"``: each RPC runs on one of its
worker threads, its DataPlane call too) and grpc.aio (``"aio"``: RPCs are
coroutines on the event loop that created the server).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib.metadata
import warnings
from typing import Any, final

import grpc
import grpc.aio

from servinglib.errors import UnavailableError
from servinglib.protos import health_pb2
from servinglib.server.grpc import (
    health,
    inference_service,
    model_service,
    prediction_service,
    stream_infer,
)
from servinglib.server.grpc._restricted import restrict
from servinglib.server.grpc._rpc import (
    blocking_method_handler,
    blocking_stream_handler,
    method_handler,
    stream_handler,
)
from servinglib.server.grpc.options import GrpcServerOptions, SslConfig
from servinglib.server.management.model_management import ModelManagement
from servinglib.server.observe.request_record import RequestObserver, RequestRecord
from servinglib.server.plane.data_plane import DataPlane
from servinglib.server.server_core import ServerCore


@final
class GrpcServer:
    """A created gRPC server: start it, drain it, stop it (on the loop it was created on).

    The same servicers run on either server (grpc.aio's, or grpcio's
    synchronous one, whose threads serve RPCs whatever the loop does).
    Thread safety: :meth:`set_not_serving` may be called from any thread; the
    coroutines must run on the event loop :func:`create_server` ran on.
    """

    def __init__(
        self,
        server: grpc.aio.Server | grpc.Server,
        port: int,
        health_servicer: health.HealthServicer,
        plane: DataPlane,
        *,
        owns_plane: bool,
        grace_period_s: float,
        stream_loop: stream_infer.StreamLoop | None = None,
    ) -> None:
        self._server = server
        self._port = port
        self._health = health_servicer
        self._plane = plane
        self._owns_plane = owns_plane
        self._grace_period_s = grace_period_s
        self._stream_loop = stream_loop

    @property
    def port(self) -> int:
        """The TCP port it listens on (the one chosen when the options said 0)."""
        return self._port

    @property
    def kind(self) -> str:
        """Which server runs: ``"sync"`` (grpcio's thread pool) or ``"aio"`` (grpc.aio)."""
        return "aio" if isinstance(self._server, grpc.aio.Server) else "sync"

    @property
    def plane(self) -> DataPlane:
        """The DataPlane requests go through."""
        return self._plane

    async def start(self) -> None:
        """Starts serving; returns at once (grpc.aio runs on the current loop)."""
        server = self._server
        if isinstance(server, grpc.aio.Server):
            self._health.attach(asyncio.get_running_loop())
            await server.start()
        else:
            self._health.attach(None)
            server.start()

    def set_not_serving(self) -> None:
        """Health turns NOT_SERVING (load balancers stop sending); RPCs are still served."""
        self._health.set_not_serving()

    async def stop(self, grace_s: float | None = None) -> None:
        """Refuses new RPCs, lets those in flight finish for ``grace_s``, then cancels them.

        ``grace_s`` defaults to the options' ``grace_period_s``.  Health turns
        NOT_SERVING first and its Watch streams end.  A DataPlane the server
        made itself (given a ServerCore) is closed after, and the synchronous
        server's stream loop once its last stream has ended.  Idempotent.
        """
        self._health.shutdown()
        grace = self._grace_period_s if grace_s is None else grace_s
        server = self._server
        if isinstance(server, grpc.aio.Server):
            await server.stop(grace)
        else:
            await asyncio.to_thread(server.stop(grace).wait)
        if self._stream_loop is not None:
            self._stream_loop.close()
        if self._owns_plane:
            await asyncio.to_thread(self._plane.close)

    async def wait_for_termination(self, timeout_s: float | None = None) -> bool:
        """Waits until the server stops; False if ``timeout_s`` passed first."""
        server = self._server
        if isinstance(server, grpc.aio.Server):
            return await server.wait_for_termination(timeout_s)
        return await asyncio.to_thread(server.wait_for_termination, timeout_s)


def create_server(
    target: DataPlane | ServerCore,
    options: GrpcServerOptions | None = None,
    *,
    management: ModelManagement | None = None,
    on_request: RequestObserver | None = None,
) -> tuple[GrpcServer, int]:
    """A gRPC server with TF Serving's PredictionService and ModelService, KServe V2's
    GRPCInferenceService and grpc.health.v1.Health, bound but not started; and its port.

    ``target``: the DataPlane every RPC goes through (share one with the
    REST app), or a ServerCore, for which the server makes (and on stop
    closes) its own.  ``on_request``: called with a RequestRecord when each
    RPC ends.  ``management`` decides whether RepositoryModelLoad / Unload
    and HandleReloadConfigRequest may change what is served (default: they
    answer PERMISSION_DENIED).  The groups ``options.restricted_apis`` names
    refuse RPCs without their credential (UNAUTHENTICATED, PERMISSION_DENIED).
    Requires: called from a coroutine on the event loop that will run
    :class:`GrpcServer`'s coroutines (grpc.aio binds to it).  Raises
    UnavailableError when the address cannot be bound.
    """
    options = options or GrpcServerOptions()
    observer = _observer(on_request, options.rpc_observer)
    if isinstance(target, DataPlane):
        plane, owns_plane = target, False
    else:
        plane, owns_plane = DataPlane(target), True
    if management is None:
        management = ModelManagement(plane.core)
    services = {
        prediction_service.SERVICE: prediction_service.PredictionServicer(
            plane,
            tensor_content=options.tensor_content_responses,
            decode_limits=options.decode_limits,
        ).rpcs(),
        model_service.SERVICE: model_service.ModelServicer(plane, management).rpcs(),
        inference_service.SERVICE: inference_service.InferenceServicer(
            plane,
            management,
            server_version=_version(),
            decode_limits=options.decode_limits,
            header_forwarding=options.header_forwarding,
        ).rpcs(),
    }
    health_servicer = health.HealthServicer(
        plane.core,
        services,
        poll_interval_s=options.health_poll_interval_s,
        ready=plane.questions.server_ready,
    )
    blocking = options.server == "sync"
    stream_loop = stream_infer.StreamLoop() if blocking else None
    server = _server(options)
    unary = blocking_method_handler if blocking else method_handler
    methods: dict[str, dict[str, grpc.RpcMethodHandler[Any, Any]]] = {
        name: {
            rpc.method: unary(name, rpc, observer, plane.tracing, plane.public_error)
            for rpc in rpcs
        }
        for name, rpcs in [*services.items(), (health.SERVICE, health_servicer.rpcs())]
    }
    inferer = stream_infer.StreamInferer(plane, options.decode_limits, options.header_forwarding)
    for name, streams in _streams(health_servicer, inferer, observer, stream_loop).items():
        methods[name].update(streams)
    restrict(methods, options.restricted_apis, observer)
    server.add_generic_rpc_handlers(
        [grpc.method_handlers_generic_handler(name, rpcs) for name, rpcs in methods.items()]
    )
    port = _bind(server, options)
    return (
        GrpcServer(
            server,
            port,
            health_servicer,
            plane,
            owns_plane=owns_plane,
            grace_period_s=options.grace_period_s,
            stream_loop=stream_loop,
        ),
        port,
    )


def _observer(
    on_request: RequestObserver | None, deprecated: RequestObserver | None
) -> RequestObserver | None:
    if deprecated is None:
        return on_request
    warnings.warn(
        "GrpcServerOptions.rpc_observer is deprecated: pass create_server(..., on_request=...)",
        DeprecationWarning,
        stacklevel=3,
    )
    if on_request is None:
        return deprecated

    def both(record: RequestRecord) -> None:
        on_request(record)
        deprecated(record)

    return both


def _server(options: GrpcServerOptions) -> grpc.aio.Server | grpc.Server:
    if options.server == "sync":
        return grpc.server(
            concurrent.futures.ThreadPoolExecutor(
                options.max_threads, thread_name_prefix="servinglib-grpc"
            ),
            options=options.grpc_options(),
            maximum_concurrent_rpcs=options.max_concurrent_rpcs,
        )
    return grpc.aio.server(
        options=options.grpc_options(), maximum_concurrent_rpcs=options.max_concurrent_rpcs
    )


def _streams(
    health_servicer: health.HealthServicer,
    inferer: stream_infer.StreamInferer,
    observer: RequestObserver | None,
    stream_loop: stream_infer.StreamLoop | None,
) -> dict[str, dict[str, grpc.RpcMethodHandler[Any, Any]]]:
    """The streaming RPCs, by service and method (``stream_loop``: the synchronous server's).

    A stream needs a handler per server (a generator on the synchronous
    server's thread, an async generator on grpc.aio): Health Watch and
    ModelStreamInfer.
    """
    if stream_loop is None:
        watch = stream_handler(health_pb2.HealthCheckRequest, health_servicer.watch)
        stream = stream_infer.stream_stream_handler(inference_service.SERVICE, inferer, observer)
    else:
        watch = blocking_stream_handler(
            health_pb2.HealthCheckRequest, health_servicer.watch_blocking
        )
        stream = stream_infer.blocking_stream_stream_handler(
            inference_service.SERVICE, inferer, observer, stream_loop
        )
    return {
        health.SERVICE: {"Watch": watch},
        inference_service.SERVICE: {stream_infer.METHOD: stream},
    }


def _bind(server: grpc.aio.Server | grpc.Server, options: GrpcServerOptions) -> int:
    host = options.host
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # an IPv6 address
    address = f"{host}:{options.port}"
    try:
        if options.ssl is not None:
            port = server.add_secure_port(address, _credentials(options.ssl))
        else:
            port = server.add_insecure_port(address)
        if options.unix_socket_path is not None:
            server.add_insecure_port(f"unix:{options.unix_socket_path}")
    except RuntimeError as error:
        raise UnavailableError(f"Cannot listen on {address}: {error}") from None
    if port == 0:
        raise UnavailableError(f"Cannot listen on {address}")
    return port


def _credentials(ssl: SslConfig) -> grpc.ServerCredentials:
    return grpc.ssl_server_credentials(
        [(ssl.server_key.encode(), ssl.server_cert.encode())],
        root_certificates=ssl.custom_ca.encode() or None,
        require_client_auth=ssl.client_verify,
    )


def _version() -> str:
    try:
        return importlib.metadata.version("servinglib")
    except importlib.metadata.PackageNotFoundError:
        return ""
