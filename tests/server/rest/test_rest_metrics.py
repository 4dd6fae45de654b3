"""The Prometheus endpoint in front of the REST app, and the request metrics REST feeds it."""

from __future__ import annotations

import asyncio

import httpx
from prometheus_client.parser import text_string_to_metric_families

from servinglib.server import record_request
from servinglib.server.plane.metrics import ServerMetrics
from servinglib.server.rest import RestOptions, create_app
from servinglib.server.rest.metrics_endpoint import MetricsEndpoint
from servinglib.server.server_core import ServerCore


def request_counts(text: str) -> dict[tuple[str, str], float]:
    counts = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == ":tensorflow:serving:request_count_total":
                counts[(sample.labels["model_name"], sample.labels["status"])] = sample.value
    return counts


def test_metrics_count_requests_by_canonical_status(core: ServerCore) -> None:
    """Requests are counted under their status code; the scrape paths answer; others pass."""
    metrics = ServerMetrics()
    metrics.attach(core)
    inner = create_app(core, RestOptions(), on_request=record_request(metrics))
    app = MetricsEndpoint(inner, metrics)

    async def run() -> tuple[str, int, int, int]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            ok = await client.post("/v1/models/half_plus_two:predict", json={"instances": [1.0]})
            assert ok.status_code == 200
            missing = await client.post(
                "/v1/models/half_plus_two:predict",
                json={"signature_name": "nope", "instances": [1.0]},
            )
            assert missing.status_code == 400
            await client.get("/v2/health/ready")  # names no model: not counted
            scrape = await client.get("/monitoring/prometheus/metrics")
            head = await client.head("/metrics")
            post = await client.post("/metrics")
        inner.close()
        return scrape.text, scrape.status_code, head.status_code, post.status_code

    text, scraped, head, post = asyncio.run(run())
    assert (scraped, head, post) == (200, 200, 405)
    counts = request_counts(text)
    assert counts[("half_plus_two", "OK")] == 1
    assert counts[("half_plus_two", "FAILED_PRECONDITION")] == 1
    assert all(model for model, _ in counts)
