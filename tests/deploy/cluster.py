"""A cluster in a box: server replicas on 127.0.0.1 behind HAProxy, and clients that count.

The replicas read one S3 bucket (moto's S3 server, as in the remote-storage tests), each
downloading into a cache of its own, as pods with an ``emptyDir`` do.

HAProxy plays a Kubernetes Service whose endpoints are the ready pods: it sends requests only
to replicas whose readiness endpoint answers 200 (an active HTTP check every ``CHECK_S``, one
failure takes a replica out, two successes put it back). It never retries a request on
another replica (``retries 0``), so a request lost by a replica is a failed request here.
"""

from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import requests

from servinglib.testing import wait_until
from tests.ports import free_port
from tests.sources.object_stores import S3Store

CHECK_S = 0.2
"""HAProxy's health-check interval (its ``inter``)."""


def publish_version(store: S3Store, version: int) -> None:
    """Uploads version ``version`` of model ``m`` (y = version * x) to the shared bucket."""
    store.put_model("m", version, version)


class Replica:
    """One ``servinglib-server`` process on REST port ``port`` serving model ``m`` from ``store``.

    Like a pod, it has a cache directory of its own (an ``emptyDir``), new at each start.
    """

    def __init__(self, port: int, store: S3Store, directory: Path, log: Path, *flags: str) -> None:
        self.port = port
        self.log = log
        server = Path(sys.executable).with_name("servinglib-server")
        cache = tempfile.mkdtemp(prefix="cache-", dir=directory)
        with log.open("a") as output:
            self.process = subprocess.Popen(
                [
                    str(server),
                    "--port=0",
                    f"--rest_api_port={port}",
                    "--rest_api_host=127.0.0.1",
                    "--model_name=m",
                    f"--model_base_path={store.url('m')}",
                    f"--model_cache_dir={cache}",
                    "--model_platform=python",
                    "--allow_python_code_execution=true",
                    *flags,
                ],
                stdout=output,
                stderr=subprocess.STDOUT,
                env={**os.environ, **store.env},
            )

    def ready(self) -> bool:
        """Whether the replica's readiness endpoint answers 200 now."""
        try:
            return requests.get(f"http://127.0.0.1:{self.port}/v2/health/ready", timeout=2).ok
        except requests.RequestException:
            return False

    def serving_version(self) -> str | None:
        """The version an inference on this replica (directly) ran, or None if it failed."""
        try:
            answer = requests.post(
                f"http://127.0.0.1:{self.port}/v2/models/m/infer", json=_REQUEST, timeout=5
            )
        except requests.RequestException:
            return None
        return str(answer.json()["model_version"]) if answer.ok else None

    def output(self) -> str:
        """What the process printed (killing it first if it still runs)."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)
        return self.log.read_text()


class HAProxy:
    """HAProxy in front of ``ports``, health-checking each on /v2/health/ready."""

    def __init__(self, directory: Path, ports: list[int]) -> None:
        self.port, self.stats_port = free_port(), free_port()
        servers = "\n".join(
            f"    server r{i} 127.0.0.1:{port} check" for i, port in enumerate(ports)
        )
        config = directory / "haproxy.cfg"
        config.write_text(
            _HAPROXY_CONFIG.format(
                port=self.port,
                stats_port=self.stats_port,
                servers=servers,
                check_ms=int(CHECK_S * 1e3),
            )
        )
        check = subprocess.run(
            ["haproxy", "-c", "-f", str(config)], capture_output=True, text=True, check=False
        )
        assert check.returncode == 0, check.stdout + check.stderr
        self.process = subprocess.Popen(
            ["haproxy", "-db", "-f", str(config)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def statuses(self) -> dict[str, str]:
        """Each replica's state as HAProxy sees it now: ``UP``, ``DOWN``, ``UP 1/2``, ..."""
        try:
            text = requests.get(f"http://127.0.0.1:{self.stats_port}/stats;csv", timeout=2).text
        except requests.RequestException:
            return {}
        rows = csv.DictReader(io.StringIO(text.lstrip("# ")))
        return {
            row["svname"]: row["status"]
            for row in rows
            if row["pxname"] == "replicas" and row["svname"] not in {"FRONTEND", "BACKEND"}
        }

    def wait_status(self, replica: int, status: str, timeout_s: float = 60) -> None:
        """Waits until HAProxy reports ``status`` for replica number ``replica``."""
        wait_until(lambda: self.statuses().get(f"r{replica}") == status, timeout_s=timeout_s)

    def close(self) -> str:
        """Stops HAProxy; what it printed."""
        self.process.terminate()
        output, _ = self.process.communicate(timeout=30)
        return output


class Clients:
    """``threads`` clients sending V2 inferences through HAProxy until stopped, counting outcomes.

    Bounded: each stops after ``limit_s`` seconds whatever happens.
    """

    def __init__(self, port: int, threads: int = 8, limit_s: float = 240) -> None:
        self._url = f"http://127.0.0.1:{port}/v2/models/m/infer"
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._deadline = time.monotonic() + limit_s
        self.versions: Counter[str] = Counter()  # guarded by: _lock
        self.failures: list[str] = []  # guarded by: _lock
        self._last: dict[str, float] = {}  # version → monotonic time of its last answer
        self._threads = [
            threading.Thread(target=self._run, name=f"client-{i}", daemon=True)
            for i in range(threads)
        ]
        for thread in self._threads:
            thread.start()

    @property
    def total(self) -> int:
        """Requests answered so far, failed ones included."""
        with self._lock:
            return sum(self.versions.values()) + len(self.failures)

    def versions_after(self, start: float) -> set[str]:
        """Versions answered after monotonic time ``start`` (a snapshot)."""
        with self._lock:
            return {version for version, at in self._last.items() if at >= start}

    def stop(self) -> None:
        """Stops every client and waits for them."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)

    def _run(self) -> None:
        session = requests.Session()
        while not self._stop.is_set() and time.monotonic() < self._deadline:
            try:
                answer = session.post(self._url, json=_REQUEST, timeout=30)
            except requests.RequestException as error:
                self._fail(f"{type(error).__name__}: {error}")
                continue
            if not answer.ok:
                self._fail(f"HTTP {answer.status_code}: {answer.text[:200]}")
                continue
            version = str(answer.json()["model_version"])
            now = time.monotonic()
            with self._lock:
                self.versions[version] += 1
                self._last[version] = now
        session.close()

    def _fail(self, what: str) -> None:
        with self._lock:
            self.failures.append(what)


_REQUEST = {"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1.0]}]}

_HAPROXY_CONFIG = """\
global
    maxconn 512

defaults
    mode http
    timeout connect 2s
    timeout client 60s
    timeout server 60s
    # A Service does not retry a request on another pod: neither does this balancer.
    retries 0
    # A fresh server connection per request: no reuse of a connection the replica is closing.
    option http-server-close

frontend clients
    bind 127.0.0.1:{port}
    default_backend replicas

backend replicas
    balance roundrobin
    option httpchk GET /v2/health/ready
    http-check expect status 200
    default-server inter {check_ms} fall 1 rise 2
{servers}

listen stats
    bind 127.0.0.1:{stats_port}
    stats enable
    stats uri /stats
"""
