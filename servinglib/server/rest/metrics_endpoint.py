"""The Prometheus scrape endpoint, in front of the REST app."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any, final

from servinglib.errors import ServingError
from servinglib.server.auth.api_groups import REST_API_GROUPS
from servinglib.server.auth.restricted_apis import RestrictedApis
from servinglib.server.observe.metrics import CONTENT_TYPE, DEFAULT_METRICS_PATH, ServerMetrics
from servinglib.server.observe.request_record import record_request
from servinglib.server.rest.exchange import RestResponse
from servinglib.server.rest.restricted import check_headers
from servinglib.server.rest.router import below_root

__all__ = ["MetricsEndpoint", "record_request"]

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


@final
class MetricsEndpoint:
    """An ASGI app answering GET on the metrics paths with the scrape text, the rest to ``app``.

    The paths are matched below the ASGI ``root_path``, as the REST app's.
    The text is rendered off the event loop, one render at a time (see the
    module's docstring).  With ``restricted`` locking the ``statistics``
    group, a scrape needs its credential (401 / 403 as the REST app answers).

    Thread-safe, like the app it wraps.
    """

    def __init__(
        self,
        app: App,
        metrics: ServerMetrics,
        paths: Iterable[str] = (DEFAULT_METRICS_PATH, "/metrics"),
        restricted: RestrictedApis | None = None,
    ) -> None:
        self._app = app
        locked = restricted.by_api(REST_API_GROUPS) if restricted is not None else {}
        self._restricted = locked.get("metrics")
        self._render = _SharedRender(metrics.render)
        self._paths = frozenset(paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        path: str = scope["path"]
        root_path: str | None = scope.get("root_path")
        if root_path:
            path = below_root(path, root_path)
        if path not in self._paths:
            await self._app(scope, receive, send)
            return
        if scope["method"] not in {"GET", "HEAD"}:
            body = b'{"error": "Method not allowed: metrics are read with GET"}'
            await _respond(send, 405, body, b"application/json")
            return
        if self._restricted is not None:
            try:
                check_headers(self._restricted, scope["headers"])
            except ServingError as error:
                refused = RestResponse.error(error)
                await _respond(send, refused.status, refused.body, refused.content_type)
                return
        body = await self._render()
        head = scope["method"] == "HEAD"
        await _respond(send, 200, body, CONTENT_TYPE.encode(), head=head)


@final
class _SharedRender:
    """Runs ``render`` on a thread of its own, one run at a time; callers meanwhile share it.

    Thread-safe: awaited from any event loop.
    """

    def __init__(self, render: Callable[[], bytes]) -> None:
        self._render = render
        self._lock = threading.Lock()
        self._running: concurrent.futures.Future[bytes] | None = None  # guarded by: _lock

    async def __call__(self) -> bytes:
        """The text of the render running now, or of one started for this call."""
        with self._lock:
            running = self._running
            if running is None or running.done():
                running = self._running = concurrent.futures.Future()
                threading.Thread(
                    target=self._run, args=(running,), name="servinglib-metrics", daemon=True
                ).start()
        # Shielded: a scrape whose client left must not cancel the render others wait for.
        return await asyncio.shield(asyncio.wrap_future(running))

    def _run(self, result: concurrent.futures.Future[bytes]) -> None:
        try:
            result.set_result(self._render())
        except BaseException as error:  # noqa: BLE001 - handed to every waiting scrape
            result.set_exception(error)


async def _respond(
    send: Send, status: int, body: bytes, content_type: bytes, *, head: bool = False
) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": b"" if head else body})
