"""Benchmark: issue 31's connection floods against a fresh ``python -m servinglib`` each.

- ``idle-grpc``: the server may open 1,024 files (``prlimit``); 1,100 clients connect to the
  gRPC port and send nothing. Then: does REST answer, does a gRPC client, does a new model
  version load, how many "Too many open files" lines were logged, and when the server closed
  the silent connections.
- ``slow-headers``: 1,000 clients send a request line and one header, never the end of the
  headers. Then: how a new well-behaved client is answered (status, seconds).
- ``pipelined``: one client pipelines 12 MB of ``GET /v2/health/live`` and never reads. Then:
  the server's RSS growth, whether another client is answered, and the RSS after the flood's
  connection closed.

Run it with the code to measure on PYTHONPATH (e.g. an older checkout for "before").
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import selectors
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

# bench/grpc.py, beside this file, would shadow grpcio: drop this directory from sys.path.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

MODEL_PY = """
from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec

class Model(PythonModel):
    @signature(name="serving_default", inputs=[TensorSpec("x", "float32", [-1])],
               outputs=[TensorSpec("y", "float32", [-1])])
    def predict(self, x):
        return {"y": x * %d}
"""
CONFIG = 'model_config_list { config { name: "m" base_path: "%s" model_platform: "python" } }'
LIVE = b"GET /v2/health/live HTTP/1.1\r\nHost: t\r\n\r\n"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


class _Server:
    def __init__(self, root: Path, *launcher: str) -> None:
        version = root / "m" / "1"
        version.mkdir(parents=True)
        (version / "model.py").write_text(textwrap.dedent(MODEL_PY % 3))
        (root / "models.config").write_text(CONFIG % (root / "m"))
        self.root = root
        self.rest, self.grpc = _free_port(), _free_port()
        self.log = (root / "server.log").open("w+")
        self.process = subprocess.Popen(
            [
                *launcher,
                sys.executable,
                "-m",
                "servinglib",
                f"--model_config_file={root / 'models.config'}",
                "--allow_python_code_execution",
                "--file_system_poll_wait_seconds=0.2",
                f"--rest_api_port={self.rest}",
                f"--port={self.grpc}",
                "--rest_api_host=127.0.0.1",
                "--grpc_host=127.0.0.1",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while self.get("/v2/health/ready", 1.0)[0] != 200:
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise RuntimeError("the server did not start:\n" + self.output())
            time.sleep(0.1)

    def get(self, path: str, timeout_s: float) -> tuple[int | str, float]:
        started = time.monotonic()
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.rest}{path}", timeout=timeout_s
            ) as answer:
                status: int | str = answer.status
        except urllib.error.HTTPError as error:
            status = error.code
        except OSError as error:
            status = type(error).__name__
        return status, time.monotonic() - started

    def predict(self, timeout_s: float) -> str:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.rest}/v1/models/m:predict",
            data=b'{"instances": [1.0]}',
            headers={"content-type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as answer:
                return answer.read().decode()
        except OSError as error:
            return type(error).__name__

    def rss_mib(self) -> float:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def output(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def close(self) -> None:
        self.process.kill()
        self.process.wait()
        self.log.close()


@contextlib.contextmanager
def _serving(*launcher: str) -> Iterator[_Server]:
    with tempfile.TemporaryDirectory() as root:
        server = _Server(Path(root), *launcher)
        try:
            yield server
        finally:
            server.close()


def _grpc_health(port: int) -> str:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    options = [("grpc.use_local_subchannel_pool", 1)]
    with grpc.insecure_channel(f"127.0.0.1:{port}", options=options) as channel:
        try:
            stub = health_pb2_grpc.HealthStub(channel)
            return str(stub.Check(health_pb2.HealthCheckRequest(), timeout=5).status)
        except grpc.RpcError as error:
            return error.code().name


def idle_grpc(connections: int) -> None:
    with _serving("prlimit", "--nofile=1024:1024", "--") as server, ExitStack() as stack:
        silent = [
            stack.enter_context(socket.create_connection(("127.0.0.1", server.grpc)))
            for _ in range(connections)
        ]
        opened = time.monotonic()
        print(f"  {connections} silent gRPC connections open")
        print(f"  REST predict: {server.predict(5)}")
        print(f"  gRPC health:  {_grpc_health(server.grpc)}")
        staging = server.root / "staging"
        staging.mkdir()
        (staging / "model.py").write_text(textwrap.dedent(MODEL_PY % 4))
        os.rename(staging, server.root / "m" / "2")
        deadline = time.monotonic() + 20
        loaded = False
        while not loaded and time.monotonic() < deadline:
            loaded = server.predict(2).replace(" ", "") == '{"predictions":[4.0]}'
            time.sleep(0.2)
        print(f"  version 2 served within 20 s: {loaded} ({time.monotonic() - opened:.1f} s)")
        watching = selectors.DefaultSelector()  # epoll: select() stops at descriptor 1023
        for client in silent:
            client.setblocking(False)
            watching.register(client, selectors.EVENT_READ)
        closed_at: list[float] = []
        while len(closed_at) < len(silent) and time.monotonic() - opened < 150:
            for key, _ in watching.select(1.0):
                client = key.fileobj
                assert isinstance(client, socket.socket)
                try:
                    if client.recv(65536):
                        continue
                except OSError:
                    pass
                watching.unregister(client)
                closed_at.append(time.monotonic() - opened)
        closed = len(closed_at)
        last = f"{max(closed_at):.1f} s" if closed_at else "-"
        print(f"  closed by the server within 150 s: {closed} (the last after {last})")
        print(
            f"  REST predict after: {server.predict(5)}; gRPC health after: "
            f"{_grpc_health(server.grpc)}"
        )
        print(f"  'Too many open files' lines: {server.output().count('Too many open files')}")
        if os.environ.get("SHOW_LOG"):
            print(server.output()[-3000:])


def slow_headers(clients: int) -> None:
    with _serving() as server, ExitStack() as stack:
        for _ in range(clients):
            client = stack.enter_context(socket.create_connection(("127.0.0.1", server.rest)))
            client.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: t\r\n")
        time.sleep(1.0)  # let the server read them all
        for attempt in range(3):
            status, seconds = server.get("/v2/health/live", 90)
            print(f"  new client {attempt + 1}: {status} in {seconds:.2f} s")


def pipelined(megabytes: int) -> None:
    with _serving() as server:
        server.get("/v2/health/live", 5)
        before = server.rss_mib()
        with socket.create_connection(("127.0.0.1", server.rest)) as client:
            client.setblocking(False)
            payload = memoryview(LIVE * (megabytes * (1 << 20) // len(LIVE)))
            sent = 0
            while sent < len(payload):
                try:
                    sent += client.send(payload[sent : sent + (1 << 20)])
                except BlockingIOError:
                    _, writable, _ = select.select([], [client], [], 3.0)
                    if not writable:
                        break
            time.sleep(1.0)
            during = server.rss_mib()
            print(f"  sent {sent / (1 << 20):.1f} MiB of pipelined requests, never reading")
            print(f"  RSS {before:.0f} MiB -> {during:.0f} MiB (+{during - before:.0f})")
            status, seconds = server.get("/v2/health/live", 30)
            print(f"  another client meanwhile: {status} in {seconds:.2f} s")
        time.sleep(2.0)
        after = server.rss_mib()
        print(f"  RSS 2 s after the connection closed: {after:.0f} MiB (+{after - before:.0f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only", choices=["idle-grpc", "slow-headers", "pipelined"], action="append"
    )
    args = parser.parse_args()
    chosen = args.only or ["idle-grpc", "slow-headers", "pipelined"]
    if "idle-grpc" in chosen:
        print("idle-grpc: 1,100 silent connections to the gRPC port, 1,024 files allowed")
        idle_grpc(1100)
    if "slow-headers" in chosen:
        print("slow-headers: 1,000 clients whose headers never end")
        slow_headers(1000)
    if "pipelined" in chosen:
        print("pipelined: 12 MB of pipelined GET /v2/health/live, never read")
        pipelined(12)


if __name__ == "__main__":
    main()
