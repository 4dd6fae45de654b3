"""RequestRecord: what one finished request was, the same record for every front end."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, final

import attrs

from servinglib.errors import StatusCode

if TYPE_CHECKING:
    from servinglib.server.observe.metrics import ServerMetrics


@final
@attrs.frozen(kw_only=True)
class RequestRecord:
    """What one finished request or RPC was: model, API, entrypoint, status code, latency.

    ``code``: the canonical status (over REST the one behind the HTTP
    status).  ``model_name`` is empty for requests about no model.  ``api``
    names the endpoint or RPC ("predict", "infer", ...; REST says "unknown"
    for unmatched paths).  ``entrypoint``: ``REST`` or ``GRPC``.
    ``latency_s`` runs from the request's arrival to its response.  REST sets
    ``status`` (0 over gRPC); gRPC sets ``service`` and ``method`` (empty over
    REST).
    Immutable, so thread-safe.
    """

    model_name: str
    api: str
    entrypoint: str
    code: StatusCode
    latency_s: float
    status: int = 0
    service: str = ""
    method: str = ""


RequestObserver = Callable[[RequestRecord], None]
"""Called once per finished request, on the front end's event loop (or, for the synchronous
gRPC server, on the RPC's worker thread: so thread-safe): keep it to microseconds, and never
raise."""


def record_request(metrics: ServerMetrics) -> RequestObserver:
    """An observer feeding ``metrics`` with each model request, from either front end."""

    def observe(record: RequestRecord) -> None:
        if record.model_name:  # server-level requests (health, listing) are not model requests
            metrics.observe_request(
                record.model_name, record.api, record.entrypoint, record.code, record.latency_s
            )

    return observe
