"""create_server: the gRPC server with every servicer, and GrpcServer, its lifecycle."""

from __future__ import annotations

import asyncio
import importlib.metadata
import warnings
from collections.abc import Sequence
from typing import Any, final

import grpc
import grpc.aio

from servinglib.errors import UnavailableError
from servinglib.protos import health_pb2
from servinglib.server.grpc import health, inference_service, model_service, prediction_service
from servinglib.server.grpc._rpc import Rpc, RpcObserver, method_handler, stream_handler
from servinglib.server.grpc.options import GrpcServerOptions, SslConfig
from servinglib.server.plane.data_plane import DataPlane
from servinglib.server.plane.model_management import ModelManagement
from servinglib.server.plane.request_record import RequestObserver, RequestRecord
from servinglib.server.plane.tracing import Tracing
from servinglib.server.server_core import ServerCore


@final
class GrpcServer:
    """A created gRPC server: start it, drain it, stop it (on the loop it was created on).

    Thread safety: :meth:`set_not_serving` may be called from any thread; the
    coroutines must run on the event loop :func:`create_server` ran on.
    """

    def __init__(
        self,
        server: grpc.aio.Server,
        port: int,
        health_servicer: health.HealthServicer,
        plane: DataPlane,
        *,
        owns_plane: bool,
        grace_period_s: float,
    ) -> None:
        self._server = server
        self._port = port
        self._health = health_servicer
        self._plane = plane
        self._owns_plane = owns_plane
        self._grace_period_s = grace_period_s

    @property
    def port(self) -> int:
        """The TCP port it listens on (the one chosen when the options said 0)."""
        return self._port

    @property
    def plane(self) -> DataPlane:
        """The DataPlane requests go through."""
        return self._plane

    async def start(self) -> None:
        """Starts serving; returns at once (the server runs on the current loop)."""
        self._health.attach(asyncio.get_running_loop())
        await self._server.start()

    def set_not_serving(self) -> None:
        """Health turns NOT_SERVING (load balancers stop sending); RPCs are still served."""
        self._health.set_not_serving()

    async def stop(self, grace_s: float | None = None) -> None:
        """Refuses new RPCs, lets those in flight finish for ``grace_s``, then cancels them.

        ``grace_s`` defaults to the options' ``grace_period_s``.  Health turns
        NOT_SERVING first and its Watch streams end.  A DataPlane the server
        made itself (given a ServerCore) is closed after.  Idempotent.
        """
        self._health.shutdown()
        await self._server.stop(self._grace_period_s if grace_s is None else grace_s)
        if self._owns_plane:
            await asyncio.to_thread(self._plane.close)

    async def wait_for_termination(self, timeout_s: float | None = None) -> bool:
        """Waits until the server stops; False if ``timeout_s`` passed first."""
        return await self._server.wait_for_termination(timeout_s)


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
    REST app: both then answer alike from one worker pool), or a
    ServerCore, for which the server makes (and on stop closes) its own;
    the REST ``create_app`` takes the same.  ``on_request``: called with a
    :class:`~servinglib.server.plane.request_record.RequestRecord` when each
    RPC ends (e.g. ``record_request(metrics)``); ``options.rpc_observer`` is
    its deprecated spelling.  ``management`` decides whether RepositoryModelLoad / Unload
    and HandleReloadConfigRequest may change what is served; default: a
    ModelManagement with remote management off (they answer
    PERMISSION_DENIED).  Servicers are registered under the wire service
    names with our own messages, so the official clients work unchanged.
    Requires: called from a coroutine on the event loop that will run the
    server (grpc.aio binds to it).  Raises UnavailableError when the address
    cannot be bound.
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
            plane, management, server_version=_version(), decode_limits=options.decode_limits
        ).rpcs(),
    }
    health_servicer = health.HealthServicer(
        plane.core, services, poll_interval_s=options.health_poll_interval_s
    )
    server = grpc.aio.server(
        options=options.grpc_options(), maximum_concurrent_rpcs=options.max_concurrent_rpcs
    )
    handlers = [_generic(name, rpcs, observer, plane.tracing) for name, rpcs in services.items()]
    health_handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {
        rpc.method: method_handler(health.SERVICE, rpc, observer) for rpc in health_servicer.rpcs()
    }
    health_handlers["Watch"] = stream_handler(health_pb2.HealthCheckRequest, health_servicer.watch)
    handlers.append(grpc.method_handlers_generic_handler(health.SERVICE, health_handlers))
    server.add_generic_rpc_handlers(handlers)
    port = _bind(server, options)
    return (
        GrpcServer(
            server,
            port,
            health_servicer,
            plane,
            owns_plane=owns_plane,
            grace_period_s=options.grace_period_s,
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


def _generic(
    service: str, rpcs: Sequence[Rpc[Any]], observer: RpcObserver | None, tracing: Tracing | None
) -> grpc.GenericRpcHandler:
    return grpc.method_handlers_generic_handler(
        service, {rpc.method: method_handler(service, rpc, observer, tracing) for rpc in rpcs}
    )


def _bind(server: grpc.aio.Server, options: GrpcServerOptions) -> int:
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
