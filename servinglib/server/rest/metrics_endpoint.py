"""The Prometheus scrape endpoint, in front of the REST app.

``record_request`` (which feeds the metrics from either front end) is
:mod:`servinglib.server`'s, also importable from here as before.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any, final

from servinglib.server.plane.metrics import CONTENT_TYPE, DEFAULT_METRICS_PATH, ServerMetrics
from servinglib.server.plane.request_record import record_request
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

    Thread-safe, like the app it wraps.
    """

    def __init__(
        self,
        app: App,
        metrics: ServerMetrics,
        paths: Iterable[str] = (DEFAULT_METRICS_PATH, "/metrics"),
    ) -> None:
        self._app = app
        self._metrics = metrics
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
        body = self._metrics.render()
        head = scope["method"] == "HEAD"
        await _respond(send, 200, body, CONTENT_TYPE.encode(), head=head)


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
