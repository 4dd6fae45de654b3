"""The Prometheus endpoint in front of the REST app, and the request metrics REST feeds it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import final

import httpx
from prometheus_client.parser import text_string_to_metric_families

from servinglib.server import record_request
from servinglib.server.observe.metrics import ServerMetrics
from servinglib.server.rest import RestOptions, RestServer, create_app
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


@final
class HeldCollector:
    """A collector whose collect() waits until released: a scrape as slow as the test wants."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.calls = 0

    def describe(self) -> list[object]:
        return []

    def collect(self) -> Iterator[object]:
        self.calls += 1
        self.entered.set()
        assert self.release.wait(10), "the test never released the scrape"
        return iter(())


def test_a_scrape_renders_off_the_event_loop(core: ServerCore) -> None:
    """While a scrape renders, the same server answers a readiness probe (over real TCP)."""
    metrics = ServerMetrics()
    held = HeldCollector()
    metrics.registry.register(held)
    app = create_app(core, RestOptions(), on_request=record_request(metrics))
    with RestServer(MetricsEndpoint(app, metrics)) as server, ThreadPoolExecutor(1) as pool:
        try:
            scrape = pool.submit(httpx.get, f"{server.url}/metrics", timeout=60.0)
            assert held.entered.wait(30)
            ready = httpx.get(f"{server.url}/v2/health/ready", timeout=10.0)
            assert ready.status_code == 200
            assert not scrape.done()
        finally:
            held.release.set()
        assert scrape.result().status_code == 200
    app.close()


def test_scrapes_during_a_render_share_it(core: ServerCore) -> None:
    """Scrapes arriving while one renders get its text: one render at a time, whatever comes."""
    metrics = ServerMetrics()
    held = HeldCollector()
    metrics.registry.register(held)
    inner = create_app(core, RestOptions(), on_request=record_request(metrics))
    app = MetricsEndpoint(inner, metrics)

    async def run() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            scrapes = [asyncio.ensure_future(client.get("/metrics")) for _ in range(5)]
            await asyncio.to_thread(held.entered.wait, 30)
            await asyncio.sleep(0)  # every scrape task reaches the render it waits for
            held.release.set()
            return await asyncio.gather(*scrapes)

    try:
        responses = asyncio.run(run())
    finally:
        held.release.set()
    inner.close()
    assert [response.status_code for response in responses] == [200] * 5
    assert len({response.text for response in responses}) == 1
    assert held.calls == 1
