"""servinglib-server --num_workers: worker processes sharing ports, supervised, one metrics set."""

from __future__ import annotations

import concurrent.futures
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import httpx
import pytest

from servinglib.loaders.warmup import WarmupOptions
from servinglib.server.cli import FlagError, parse_flags
from servinglib.server.cli.model_server import platform_configs, worker_intra_op_threads
from servinglib.testing import write_python_model
from tests.ports import free_port
from tests.server.cli.test_model_server import config_of

PID_MODEL_PY = """
import os
import time
from pathlib import Path

import numpy as np

from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec

class Model(PythonModel):
    def load(self, path):
        # Beside the model, not in its version directory: a version directory whose files keep
        # changing never settles, so a worker that has not loaded it yet never would.
        version = Path(path)
        self.calls = version.parent.parent / f"{version.parent.name}-calls"
        self.calls.mkdir(exist_ok=True)

    @signature(name="serving_default", inputs=[TensorSpec("x", "float32", [-1])],
               outputs=[TensorSpec("pid", "int64", [-1])])
    def predict(self, x):
        (self.calls / f"{os.getpid()}-{time.monotonic_ns()}").write_text("")
        time.sleep(float(x[0]) if len(x) else 0.0)  # x[0]: seconds to take
        return {"pid": np.full(x.shape, os.getpid(), dtype=np.int64)}
"""


def wait_until(
    predicate: Callable[[], bool], timeout_s: float, explain: Callable[[], str] = str
) -> None:
    """Returns once ``predicate()`` is true; raises TimeoutError after ``timeout_s``.

    Checks every 20 ms: the predicates read logs and ask servers, which share two cores.
    ``explain()`` is added to the error (e.g. the server's output).
    """
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"condition not met within {timeout_s} s\n{explain()}")
        time.sleep(0.02)


def pid_model(root: Path, name: str) -> Path:
    return write_python_model(root, name, PID_MODEL_PY)


class Workers:
    """A servinglib-server --num_workers=2 process on free ports; its output goes to a file."""

    def __init__(self, root: Path, *args: str, num_workers: int = 2) -> None:
        self.rest_port, self.grpc_port = free_port(), free_port()
        self.log = root / "server.log"
        with self.log.open("w") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "servinglib",
                    f"--num_workers={num_workers}",
                    f"--rest_api_port={self.rest_port}",
                    f"--port={self.grpc_port}",
                    "--rest_api_host=127.0.0.1",
                    "--grpc_host=127.0.0.1",
                    "--allow_python_code_execution",
                    *args,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.url = f"http://127.0.0.1:{self.rest_port}"

    def output(self) -> str:
        return self.log.read_text()

    def wait_serving(self) -> None:
        wait_until(
            lambda: "Serving with" in self.output() or self.process.poll() is not None,
            timeout_s=90,
        )
        assert self.process.poll() is None, self.output()

    def rest_pid(self, model: str = "m", seconds: float = 0.0) -> int:
        """The PID answering a REST predict on a new connection."""
        response = httpx.post(
            f"{self.url}/v1/models/{model}:predict", json={"instances": [seconds]}, timeout=60
        )
        assert response.status_code == 200, response.text
        return int(response.json()["predictions"][0])

    def grpc_pid(self, model: str = "m") -> int:
        """The PID answering a TF Serving Predict on a new connection."""
        from tensorflow.core.framework import tensor_pb2, tensor_shape_pb2, types_pb2
        from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

        request = predict_pb2.PredictRequest()
        request.model_spec.name = model
        request.inputs["x"].CopyFrom(
            tensor_pb2.TensorProto(
                dtype=types_pb2.DT_FLOAT,
                tensor_shape=tensor_shape_pb2.TensorShapeProto(
                    dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=1)]
                ),
                float_val=[0.0],
            )
        )
        # A channel of its own (no shared subchannel): a new TCP connection each call.
        options = [("grpc.use_local_subchannel_pool", 1)]
        with grpc.insecure_channel(f"127.0.0.1:{self.grpc_port}", options=options) as channel:
            stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
            response = stub.Predict(request, timeout=30)
        return int(response.outputs["pid"].int64_val[0])

    def pids_seen(self, ask: str, count: int, model: str = "m") -> set[int]:
        """The PIDs answering until ``count`` distinct ones did (or 200 requests)."""
        seen: set[int] = set()
        for _ in range(200):
            seen.add(self.rest_pid(model) if ask == "rest" else self.grpc_pid(model))
            if len(seen) >= count:
                break
        return seen

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def worker_pids(supervisor: int) -> set[int]:
    children = Path(f"/proc/{supervisor}/task/{supervisor}/children").read_text().split()
    return {int(pid) for pid in children}


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Workers]:
    pid_model(tmp_path, "m")
    running = Workers(tmp_path, f"--model_config_file={config_of(tmp_path, 'm')}")
    try:
        running.wait_serving()
        yield running
    finally:
        running.stop()


def test_both_workers_answer_rest_and_grpc(workers: Workers) -> None:
    """With two workers, new REST and gRPC connections are answered by both worker PIDs."""
    children = worker_pids(workers.process.pid)
    assert len(children) == 2
    assert workers.pids_seen("rest", 2) == children
    assert workers.pids_seen("grpc", 2) == children


def test_a_killed_worker_comes_back_and_the_port_keeps_answering(workers: Workers) -> None:
    """A worker killed with SIGKILL is logged and started again; the port answers throughout."""
    before = worker_pids(workers.process.pid)
    killed = min(before)
    os.kill(killed, signal.SIGKILL)
    # Connections the kernel queued on the killed worker's socket before it closed are lost.
    wait_until(lambda: killed not in worker_pids(workers.process.pid), timeout_s=30)
    for _ in range(20):
        assert workers.rest_pid() in before | worker_pids(workers.process.pid)
    wait_until(
        lambda: (
            len(worker_pids(workers.process.pid) - before) == 1
            and "serves" in workers.output().rsplit("was killed by SIGKILL", 1)[-1]
        ),
        timeout_s=90,
    )
    assert f"(pid {killed}) was killed by SIGKILL; starting it again" in workers.output()
    assert workers.pids_seen("rest", 2) == worker_pids(workers.process.pid)


def test_sigterm_drains_requests_in_flight_on_both_workers(tmp_path: Path) -> None:
    """Requests in flight on both workers when SIGTERM arrives all complete, and the exit is 0."""
    pid_model(tmp_path, "m")
    running = Workers(
        tmp_path,
        f"--model_config_file={config_of(tmp_path, 'm')}",
        "--shutdown_grace_seconds=30",
    )
    try:
        running.wait_serving()
        children = worker_pids(running.process.pid)
        calls_dir = tmp_path / "m-calls"

        def pid_on(client: httpx.Client, seconds: float) -> int:
            response = client.post("/v1/models/m:predict", json={"instances": [seconds]})
            assert response.status_code == 200, response.text
            return int(response.json()["predictions"][0])

        # One kept-alive connection per worker, found by asking which PID answers on it (the
        # kernel picks a worker per connection), so each worker gets exactly one slow call.
        clients: dict[int, httpx.Client] = {}
        for _ in range(64):
            client = httpx.Client(base_url=running.url, timeout=60)
            pid = pid_on(client, 0.0)
            if pid in clients:
                client.close()
            else:
                clients[pid] = client
            if set(clients) == children:
                break
        assert set(clients) == children
        probes = len(list(calls_dir.iterdir()))
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            calls = [pool.submit(pid_on, client, 5.0) for client in clients.values()]
            wait_until(lambda: len(list(calls_dir.iterdir())) == probes + 2, timeout_s=30)
            assert not any(call.done() for call in calls)  # both in flight
            running.process.send_signal(signal.SIGTERM)
            answered = {call.result(timeout=60) for call in calls}
        for client in clients.values():
            client.close()
        assert answered == children
        assert running.process.wait(timeout=60) == 0, running.output()
    finally:
        running.stop()


def scrape(workers: Workers) -> str:
    return httpx.get(f"{workers.url}/metrics", timeout=30).text


def request_count(text: str) -> float:
    found = re.search(r'request_count\{model_name="m",status="OK"\} (\S+)', text)
    return float(found.group(1)) if found else 0.0


@pytest.fixture
def metered(tmp_path: Path) -> Iterator[Workers]:
    pid_model(tmp_path, "m")
    running = Workers(
        tmp_path, f"--model_config_file={config_of(tmp_path, 'm')}", "--enable_metrics"
    )
    try:
        running.wait_serving()
        yield running
    finally:
        running.stop()


def test_metrics_sum_over_workers(metered: Workers) -> None:
    """A scrape on either worker counts the requests of both, and labels gauges by worker."""
    answered = [metered.rest_pid() for _ in range(30)]
    assert len(set(answered)) == 2, "the kernel gave all 30 connections to one worker"
    wait_until(lambda: request_count(scrape(metered)) == 30, timeout_s=30)
    text = scrape(metered)
    for worker in ("0", "1"):
        assert (
            f'servinglib_model_version_state{{model_name="m",state="AVAILABLE",'
            f'version="1",worker="{worker}"}} 1.0' in text
        )
    assert re.search(r'servinglib_model_load_seconds_count\{model_name="m"\} 2.0', text)


def test_a_restarted_worker_keeps_the_counters_growing(metered: Workers) -> None:
    """Killing a worker never makes the summed request count go down."""
    for _ in range(20):
        metered.rest_pid()
    wait_until(lambda: request_count(scrape(metered)) == 20, timeout_s=30)
    before = worker_pids(metered.process.pid)
    for pid in before:
        os.kill(pid, signal.SIGKILL)
    wait_until(lambda: len(worker_pids(metered.process.pid) - before) == 2, timeout_s=90)
    wait_until(lambda: metered.output().count(") serves") >= 4, timeout_s=90)
    assert request_count(scrape(metered)) == 20


def test_a_config_change_reaches_every_worker(tmp_path: Path) -> None:
    """A model added to the config file is served by both workers; a rejected config by none."""
    pid_model(tmp_path, "m")
    pid_model(tmp_path, "n")
    config = config_of(tmp_path, "m")
    running = Workers(
        tmp_path, f"--model_config_file={config}", "--model_config_file_poll_wait_seconds=0.5"
    )
    try:
        running.wait_serving()
        config_of(tmp_path, "m", "n")
        children = worker_pids(running.process.pid)

        def n_served_by_both() -> bool:
            try:
                return running.pids_seen("rest", 2, model="n") == children
            except AssertionError:  # 404 from a worker that has not read the file yet
                return False

        wait_until(n_served_by_both, timeout_s=60, explain=running.output)
        config.write_text('model_config_list { config { name: "o" no_such_field: 1 } }\n')
        wait_until(lambda: running.output().count("not applied") >= 2, timeout_s=60)
        rejected = r"worker (\d) \S+: model config file .* not applied"
        rejections = re.findall(rejected, running.output())
        assert sorted(rejections) == ["0", "1"]
        assert running.pids_seen("rest", 2, model="n") == children
    finally:
        running.stop()


def test_sighup_reloads_the_config_in_every_worker(tmp_path: Path) -> None:
    """SIGHUP to the supervisor makes both workers re-read the config file and serve its model."""
    pid_model(tmp_path, "m")
    pid_model(tmp_path, "n")
    running = Workers(tmp_path, f"--model_config_file={config_of(tmp_path, 'm')}")
    try:
        running.wait_serving()
        children = worker_pids(running.process.pid)
        config_of(tmp_path, "m", "n")
        running.process.send_signal(signal.SIGHUP)
        wait_until(lambda: running.output().count("SIGHUP received: re-reading") == 2, timeout_s=60)

        def n_served_by_both() -> bool:
            try:
                return running.pids_seen("rest", 2, model="n") == children
            except AssertionError:  # 404 from a worker still loading n
                return False

        wait_until(n_served_by_both, timeout_s=60)
        assert worker_pids(running.process.pid) == children  # reloaded, not restarted
    finally:
        running.stop()


def test_a_worker_that_cannot_start_stops_the_server(tmp_path: Path) -> None:
    """A model that fails to load in the workers exits 1 with the worker's error and the cause."""
    write_python_model(tmp_path, "broken", "raise ValueError('this version is broken')\n")
    running = Workers(
        tmp_path,
        f"--model_config_file={config_of(tmp_path, 'broken')}",
        "--max_num_load_retries=0",
    )
    try:
        assert running.process.wait(timeout=90) == 1
        output = running.output()
        assert "cannot start: worker" in output
        assert "this version is broken" in output
    finally:
        running.stop()


def test_a_port_in_use_fails_the_start_before_any_worker(tmp_path: Path) -> None:
    """A REST port held by another process fails the start with one line naming it."""
    pid_model(tmp_path, "m")
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "servinglib",
                "--num_workers=2",
                f"--rest_api_port={port}",
                f"--port={free_port()}",
                "--rest_api_host=127.0.0.1",
                f"--model_config_file={config_of(tmp_path, 'm')}",
                "--allow_python_code_execution",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert result.returncode == 1
    assert f"REST port {port} (--rest_api_port) on 127.0.0.1 is in use" in result.stderr
    assert "Starting 2 workers" not in result.stderr


SUPERVISOR_MODULES = """
import os, signal, sys, threading, time, httpx
from servinglib.server.cli.main import main

def check():
    while True:
        try:
            if httpx.get("http://127.0.0.1:%d/v1/models/half_plus_two").status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    heavy = sorted(m for m in ("tensorflow", "grpc") if m in sys.modules)
    print("supervisor imported:", heavy or "nothing heavy", flush=True)
    os.kill(os.getpid(), signal.SIGTERM)

threading.Thread(target=check, daemon=True).start()
sys.exit(main(sys.argv[1:]))
"""


def test_the_supervisor_imports_neither_tensorflow_nor_grpc() -> None:
    """While two workers serve a SavedModel, the supervisor process has no TensorFlow or grpc."""
    rest_port = free_port()
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            SUPERVISOR_MODULES % rest_port,
            "--demo",
            "--num_workers=2",
            f"--rest_api_port={rest_port}",
            f"--port={free_port()}",
            "--rest_api_host=127.0.0.1",
            "--grpc_host=127.0.0.1",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert "supervisor imported: nothing heavy" in result.stdout, result.stdout + result.stderr
    assert result.returncode == 0, result.stdout + result.stderr


def test_num_workers_takes_a_count_or_auto() -> None:
    """--num_workers is a count of at least 1 or auto (usable cores); a UNIX socket is refused."""
    assert parse_flags(["--demo"]).num_workers == 1
    assert parse_flags(["--demo", "--num_workers=3"]).num_workers == 3
    cores = len(os.sched_getaffinity(0))
    assert parse_flags(["--demo", "--num_workers=auto"]).num_workers == cores
    with pytest.raises(FlagError, match=r"--num_workers: expected a number of processes >= 1"):
        parse_flags(["--demo", "--num_workers=0"])
    with pytest.raises(FlagError, match="--grpc_socket_path serves one process"):
        parse_flags(["--demo", "--num_workers=2", "--grpc_socket_path=/tmp/s.sock"])


def test_workers_share_the_cores_among_tensorflow_intra_op_pools() -> None:
    """Each of N workers gets cores/N intra-op threads (at least 1) unless the flags set them."""
    cores = len(os.sched_getaffinity(0))
    two = parse_flags(["--demo", "--num_workers=2"])
    assert worker_intra_op_threads(two) == max(1, cores // 2)
    assert platform_configs(two, WarmupOptions())["tensorflow"].intra_op_parallelism_threads == (
        max(1, cores // 2)
    )
    many = parse_flags(["--demo", f"--num_workers={cores * 2}"])
    assert worker_intra_op_threads(many) == 1
    assert worker_intra_op_threads(parse_flags(["--demo"])) == 0
    chosen = parse_flags(["--demo", "--num_workers=2", "--tensorflow_intra_op_parallelism=7"])
    assert platform_configs(chosen, WarmupOptions())["tensorflow"].intra_op_parallelism_threads == 7
