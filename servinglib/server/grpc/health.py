"""grpc.health.v1.Health (Check, Watch) reflecting the server's readiness."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from typing import Any, Final, final

import grpc
import grpc.aio

from servinglib.core.event_bus import Subscription
from servinglib.errors import NotFoundError
from servinglib.protos import health_pb2
from servinglib.server.grpc._rpc import Context, Rpc
from servinglib.server.server_core import ServerCore

SERVICE: Final = "grpc.health.v1.Health"

_Status = health_pb2.HealthCheckResponse.ServingStatus


@final
class HealthServicer:
    """The gRPC health protocol: SERVING while the core is ready and the server not draining.

    ``ready``: what "ready" means (default: ``core.ready``).  Known services
    are the empty name and the names the server registers, all with the same
    status.  Check of an unknown service is NOT_FOUND; Watch of one reports
    SERVICE_UNKNOWN and stays open.  Watch sends the status at once and then
    each change (on model state events, and every ``poll_interval_s``).
    :meth:`set_not_serving` starts a drain; :meth:`shutdown` ends the Watch
    streams.  :meth:`watch` serves grpc.aio, :meth:`watch_blocking` grpcio's
    synchronous server (each stream holding a worker thread).
    Thread-safe for :meth:`set_not_serving` and :meth:`watch_blocking`; the
    rest runs on the server's loop (any thread for a synchronous server).
    """

    def __init__(
        self,
        core: ServerCore,
        services: Iterable[str],
        *,
        poll_interval_s: float = 1.0,
        ready: Callable[[], bool] | None = None,
    ) -> None:
        self._core = core
        self._ready = core.ready if ready is None else ready
        self._services = frozenset(services) | {""}
        self._poll_interval_s = poll_interval_s
        self._draining = False
        self._shut_down = False
        self._changed = asyncio.Event()  # loop-only: set and replaced on each change
        self._condition = threading.Condition()  # notified on each change
        self._generation = 0  # guarded by: _condition; counts the changes
        self._loop: asyncio.AbstractEventLoop | None = None
        self._subscription: Subscription | None = None

    def rpcs(self) -> list[Rpc[Any]]:
        """Check, for registration under :data:`SERVICE` (Watch streams: see :meth:`watch`)."""
        return [Rpc("Check", "health_check", health_pb2.HealthCheckRequest, self.check)]

    def attach(self, loop: asyncio.AbstractEventLoop | None) -> None:
        """Starts following model state events; call on ``loop`` before serving.

        ``loop``: the grpc.aio server's loop, or None for a synchronous server.
        """
        self._loop = loop
        self._subscription = self._core.event_bus.subscribe(
            lambda _event: self._notify_threadsafe()
        )

    def set_not_serving(self) -> None:
        """Reports NOT_SERVING from now on (a drain before stopping); idempotent."""
        self._draining = True
        self._notify_threadsafe()

    def shutdown(self) -> None:
        """Reports NOT_SERVING and ends every Watch stream; call on the server's loop."""
        self._draining = self._shut_down = True
        if self._subscription is not None:
            self._subscription.cancel()
        if self._loop is None:
            self._notify_threadsafe()
        else:
            self._notify()

    def status(self, service: str) -> int:
        """The status of ``service``: SERVING, NOT_SERVING or SERVICE_UNKNOWN."""
        if service not in self._services:
            return _Status.SERVICE_UNKNOWN
        if self._draining or not self._ready():
            return _Status.NOT_SERVING
        return _Status.SERVING

    def check(
        self, request: health_pb2.HealthCheckRequest, _context: Context
    ) -> health_pb2.HealthCheckResponse:
        """The current status; NOT_FOUND for an unknown service."""
        status = self.status(request.service)
        if status == _Status.SERVICE_UNKNOWN:
            raise NotFoundError(f"Unknown service {request.service!r}")
        return health_pb2.HealthCheckResponse(status=status)  # type: ignore[arg-type]

    def watch_blocking(
        self, request: health_pb2.HealthCheckRequest, context: grpc.ServicerContext
    ) -> Iterator[health_pb2.HealthCheckResponse]:
        """:meth:`watch` on a synchronous server's thread, until :meth:`shutdown` or the
        client leaves."""
        last: int | None = None
        while context.is_active():
            with self._condition:
                seen = self._generation
            status = self.status(request.service)
            if status != last:
                last = status
                yield health_pb2.HealthCheckResponse(status=status)  # type: ignore[arg-type]
            if self._shut_down:
                return
            with self._condition:
                if self._generation == seen:
                    self._condition.wait(self._poll_interval_s)

    async def watch(
        self, request: health_pb2.HealthCheckRequest, _context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[health_pb2.HealthCheckResponse]:
        """The current status, then every change, until :meth:`shutdown`."""
        last: int | None = None
        while True:
            changed = self._changed
            status = self.status(request.service)
            if status != last:
                last = status
                yield health_pb2.HealthCheckResponse(status=status)  # type: ignore[arg-type]
            if self._shut_down:
                return
            try:
                async with asyncio.timeout(self._poll_interval_s):
                    await changed.wait()
            except TimeoutError:
                pass

    def _notify_threadsafe(self) -> None:
        with self._condition:
            self._generation += 1
            self._condition.notify_all()
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(self._notify)
        except RuntimeError:  # the loop closed meanwhile
            return

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
