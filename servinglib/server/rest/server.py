"""RestServer: an ASGI app served in this process (uvicorn's listener, our httptools
connections, uvloop)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from typing import TYPE_CHECKING, Any, final

from servinglib._install import install_hint
from servinglib.server.rest.http_limits import HttpLimits
from servinglib.server.rest.tls import RestTls

DEFAULT_HTTP_LIMITS = HttpLimits()

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator


def _import_uvicorn() -> Any:  # noqa: ANN401 - the uvicorn module
    try:
        import uvicorn
    except ImportError as error:
        raise ImportError(f"The REST server needs uvicorn: {install_hint('rest')}") from error
    return uvicorn


@final
class RestServer:
    """Serves an ASGI app with uvicorn on a socket bound at construction (so its port is known).

    Run it in an event loop with :meth:`serve`, or on a background thread
    with its own loop with :meth:`start` / :meth:`stop`.  :meth:`stop` stops
    accepting connections, lets requests in flight finish (within
    ``graceful_timeout_s``) and closes the socket; a server stopped before it
    served never serves.  ``limits``: see :class:`HttpLimits`; ``reuse_port``
    sets ``SO_REUSEPORT``; ``tls``: serve HTTPS (the files are loaded here, so
    a bad one raises InvalidArgumentError at construction).
    Thread safety: :meth:`stop` may be called from any thread, any number
    of times; call :meth:`serve` or :meth:`start` once.
    """

    def __init__(
        self,
        app: Callable[..., Any],
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        graceful_timeout_s: float = 5.0,
        limits: HttpLimits = DEFAULT_HTTP_LIMITS,
        reuse_port: bool = False,
        tls: RestTls | None = None,
    ) -> None:
        uvicorn = _import_uvicorn()
        from servinglib.server.rest._connection import connection_factory

        settings = tls.uvicorn_settings() if tls is not None else {}
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._socket = socket.socket(family, socket.SOCK_STREAM)
        try:
            self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port:  # several processes listen; the kernel spreads connections over them
                self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            self._socket.bind((host, port))
            self._socket.listen(2048)
        except OSError:
            self._socket.close()
            raise
        self._port: int = self._socket.getsockname()[1]
        self._host = host
        self._scheme = "https" if tls is not None else "http"
        config = uvicorn.Config(
            app,
            loop=_loop_name(),
            http=connection_factory(app, limits),  # uvicorn's listener, our connections
            timeout_keep_alive=limits.idle_timeout_s,
            lifespan="off",
            access_log=False,
            log_config=None,
            timeout_graceful_shutdown=graceful_timeout_s,
            **settings,
        )
        self._started = threading.Event()
        self._server = _make_server(uvicorn, config, self._started.set)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._serving = False  # guarded by: _lock; serve() owns the socket from then on
        self._stopped = False  # guarded by: _lock

    @property
    def port(self) -> int:
        """The TCP port the server listens on (the one picked by the OS for port 0)."""
        return self._port

    @property
    def url(self) -> str:
        """``http://host:port`` (``https://`` with TLS), for clients."""
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"{self._scheme}://{host}:{self._port}"

    async def serve(self) -> None:
        """Serves until :meth:`stop` is called (or the task is cancelled), in the running loop.

        Returns at once if :meth:`stop` was called before.
        """
        with self._lock:
            if self._stopped:
                return
            self._serving = True
        try:
            await self._server.serve(sockets=[self._socket])
        except asyncio.CancelledError:
            self._close_now()
            raise
        finally:
            self._socket.close()

    def _close_now(self) -> None:
        """Closes the listener and every connection at once (uvicorn did not shut down)."""
        for listener in self._server.servers:
            listener.close()
        for connection in list(self._server.server_state.connections):
            connection.shutdown()

    def start(self, timeout_s: float = 30.0) -> None:
        """Serves on a new thread with its own event loop; returns once it accepts requests.

        Raises RuntimeError if the server failed to start within ``timeout_s``.
        """
        self._thread = threading.Thread(
            target=self._run_in_thread, name=f"servinglib-rest-{self._port}", daemon=True
        )
        self._thread.start()
        if not self._started.wait(timeout_s) or not self._server.started:
            self.stop()
            raise RuntimeError(f"The REST server on port {self._port} did not start")

    def _run_in_thread(self) -> None:
        loop_factory = _loop_factory()
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(self.serve())
        self._started.set()  # unblock start() if serving ended before it began

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stops serving (requests in flight finish first) and, if started, joins the thread.

        The socket is closed by whoever owns it: the serving loop, as uvicorn
        shuts down (closing it under uvicorn breaks its shutdown on the
        standard asyncio loop), or this call if serving never began.
        """
        with self._lock:
            self._stopped = True
            self._server.should_exit = True
            serving = self._serving
        if not serving:
            self._socket.close()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def __enter__(self) -> RestServer:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()


def _make_server(uvicorn: Any, config: Any, on_started: Callable[[], None]) -> Any:  # noqa: ANN401
    class _Server(uvicorn.Server):  # type: ignore[misc]
        """uvicorn's server, telling us when it accepts connections; no signal handlers."""

        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            on_started()

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield  # signals belong to the application embedding the server (e.g. the CLI)

    return _Server(config)


def _loop_name() -> str:
    try:
        import uvloop  # noqa: F401 - probing
    except ImportError:
        return "asyncio"
    return "uvloop"


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def create_server(
    app: Callable[..., Any],
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    graceful_timeout_s: float = 5.0,
    limits: HttpLimits = DEFAULT_HTTP_LIMITS,
    tls: RestTls | None = None,
) -> tuple[RestServer, int]:
    """A RestServer for ``app`` bound to ``host:port`` (0: any free port), and that port.

    The server is bound but not serving: call ``start()`` (own thread) or
    ``await serve()`` (current loop), and ``stop()`` to end it.
    """
    server = RestServer(
        app, host, port, graceful_timeout_s=graceful_timeout_s, limits=limits, tls=tls
    )
    return server, server.port
