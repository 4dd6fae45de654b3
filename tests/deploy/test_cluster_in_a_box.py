"""Three replicas behind HAProxy with readiness health checks, as a Service routes to pods.

Under 8 client threads: a rolling restart (SIGTERM a replica, start its replacement, wait until
the balancer sees it ready, next) fails no request; a version uploaded to the bucket every
replica reads (moto's S3 server) reaches every replica within two polls (a remote version is
complete when two listings agree) plus its download and load, failing no request.
"""

from __future__ import annotations

import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from servinglib.testing import wait_until
from tests.deploy.cluster import Clients, HAProxy, Replica, free_port, publish_version
from tests.sources.object_stores import S3Store

pytestmark = [
    pytest.mark.skipif(shutil.which("haproxy") is None, reason="needs haproxy (./dev setup)"),
    pytest.mark.timeout(300),
]

DRAIN_S = 1.5  # --drain_delay_seconds: several health checks, so HAProxy stops sending first
POLL_S = 1.0  # --file_system_poll_wait_seconds
LOAD_ALLOWANCE_S = 2.0  # a python model's download and load, on a machine busy with the clients
FLAGS = (
    f"--drain_delay_seconds={DRAIN_S}",
    "--shutdown_grace_seconds=10",
    f"--file_system_poll_wait_seconds={POLL_S}",
)


class Cluster:
    """The bucket, the replicas (replaceable) and the balancer."""

    def __init__(self, root: Path, store: S3Store) -> None:
        self.root = root
        self.store = store
        publish_version(store, 1)
        self.ports = [free_port() for _ in range(3)]
        self.replicas = [self._replica(i) for i in range(3)]
        self.haproxy = HAProxy(root, self.ports)
        for index in range(3):
            # HAProxy counts a server UP until its first check fails: first the replica itself.
            wait_until(self.replicas[index].ready, timeout_s=60)
            self.haproxy.wait_status(index, "UP")

    def restart(self, index: int) -> dict[str, float]:
        """SIGTERM replica ``index``, start its replacement; seconds each step took."""
        started = time.monotonic()
        old = self.replicas[index]
        old.process.send_signal(signal.SIGTERM)
        self.haproxy.wait_status(index, "DOWN")
        out_s = time.monotonic() - started
        status = old.process.wait(timeout=60)
        assert status == 0, old.output()
        stopped_s = time.monotonic() - started
        self.replicas[index] = self._replica(index)
        self.haproxy.wait_status(index, "UP")
        return {"out": out_s, "stopped": stopped_s, "back": time.monotonic() - started}

    def _replica(self, index: int) -> Replica:
        log = self.root / f"replica-{index}.log"
        return Replica(self.ports[index], self.store, self.root, log, *FLAGS)

    def close(self) -> None:
        self.haproxy.close()
        running = [r for r in self.replicas if r.process.poll() is None]
        for replica in running:
            replica.process.send_signal(signal.SIGTERM)
        for replica in running:
            replica.process.wait(timeout=60)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """Three ready replicas of model m (version 1, in the bucket) behind HAProxy."""
    store = S3Store()
    try:
        made = Cluster(tmp_path, store)
        try:
            yield made
        finally:
            made.close()
    finally:
        store.stop()


def test_a_rolling_restart_fails_no_request(cluster: Cluster) -> None:
    """Each replica in turn stopped by SIGTERM and replaced: 8 clients see no failure."""
    clients = Clients(cluster.haproxy.port)
    try:
        wait_until(lambda: clients.total >= 50, timeout_s=30)
        steps = [cluster.restart(index) for index in range(3)]
        before = clients.total
        wait_until(lambda: clients.total >= before + 50, timeout_s=30)
    finally:
        clients.stop()
    print(f"rolling restart: {clients.total} requests, steps (s): {steps}")
    assert clients.failures == []
    assert clients.versions == {"1": clients.total}
    for step in steps:
        # HAProxy saw the replica not ready within the drain delay, before it closed its port.
        assert step["out"] < DRAIN_S
        assert step["stopped"] >= DRAIN_S


def test_a_published_version_reaches_every_replica(cluster: Cluster) -> None:
    """Version 2 uploaded to the bucket serves on all replicas within two polls + load."""
    clients = Clients(cluster.haproxy.port)
    try:
        wait_until(lambda: clients.total >= 50, timeout_s=30)
        published = time.monotonic()
        publish_version(cluster.store, 2)
        reached = []
        for replica in cluster.replicas:
            wait_until(lambda r=replica: r.serving_version() == "2", timeout_s=30)
            reached.append(time.monotonic() - published)
        everywhere = time.monotonic()
        wait_until(lambda: clients.versions_after(everywhere + 0.5) == {"2"}, timeout_s=30)
    finally:
        clients.stop()
    print(
        f"publish: every replica serves version 2 after {max(reached):.2f} s ({reached}); "
        f"{clients.total} requests: {dict(clients.versions)}"
    )
    assert clients.failures == []
    assert max(reached) <= 2 * POLL_S + LOAD_ALLOWANCE_S
