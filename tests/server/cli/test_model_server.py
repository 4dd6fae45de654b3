"""servinglib-server end to end: a real process serving REST and gRPC, reloads, drain, failures."""

from __future__ import annotations

import concurrent.futures
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from servinglib.examples import HALF_PLUS_TWO
from servinglib.testing import wait_until, write_python_model
from tests.ports import free_port

MODEL_PY = """
from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec

class Model(PythonModel):
    @signature(name="serving_default", inputs=[TensorSpec("x", "float32", [-1])],
               outputs=[TensorSpec("y", "float32", [-1])])
    def predict(self, x):
        return {"y": x * %d}
"""

CONFIG = """
model_config_list {
  config { name: "%s" base_path: "%s" model_platform: "python" }
}
"""


def python_model(root: Path, name: str, factor: int) -> Path:
    return write_python_model(root, name, MODEL_PY % factor)


class Server:
    """A servinglib-server process on free ports, and clients of it."""

    def __init__(
        self,
        *args: str,
        cwd: Path | None = None,
        http_timeout_s: float = 10,
        launcher: tuple[str, ...] = (),
    ) -> None:
        """``launcher``: a command that runs the server's (e.g. ``prlimit --nofile=...``)."""
        self.rest_port, self.grpc_port = free_port(), free_port()
        self.process = subprocess.Popen(
            [
                *launcher,
                sys.executable,
                "-m",
                "servinglib",
                f"--rest_api_port={self.rest_port}",
                f"--port={self.grpc_port}",
                "--rest_api_host=127.0.0.1",
                "--grpc_host=127.0.0.1",
                *args,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=cwd,
        )
        self.http = httpx.Client(
            base_url=f"http://127.0.0.1:{self.rest_port}", timeout=http_timeout_s
        )
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.grpc_port}")
        self._output: str | None = None

    def ready(self) -> bool:
        try:
            return self.http.get("/v2/health/ready").status_code == 200
        except httpx.HTTPError:
            return False

    def wait_ready(self) -> None:
        wait_until(lambda: self.ready() or self.process.poll() is not None, timeout_s=60)
        assert self.process.poll() is None, self.output()

    def http_ok(self, path: str) -> bool:
        try:
            return self.http.get(path).status_code == 200
        except httpx.HTTPError:
            return False

    def predict(self, model: str, values: list[float]) -> httpx.Response:
        return self.http.post(f"/v1/models/{model}:predict", json={"instances": values})

    def health(self) -> int:
        stub = health_pb2_grpc.HealthStub(self.channel)
        response = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
        return int(response.status)

    def output(self) -> str:
        """Everything the process printed (killing it first if it still runs)."""
        if self._output is None:
            if self.process.poll() is None:
                self.process.kill()
            self._output, _ = self.process.communicate(timeout=30)
        return self._output

    def close(self) -> None:
        self.http.close()
        self.channel.close()
        self.output()


@pytest.fixture
def models(tmp_path: Path) -> Path:
    python_model(tmp_path, "triple", 3)
    config = tmp_path / "models.config"
    config.write_text(CONFIG % ("triple", tmp_path / "triple"))
    return config


@pytest.fixture
def server(models: Path) -> Iterator[Server]:
    running = Server(
        f"--model_config_file={models}",
        "--model_config_file_poll_wait_seconds=0.2",
        "--allow_python_code_execution",
        "--enable_metrics",
        "--drain_delay_seconds=2",
        "--shutdown_grace_seconds=5",
    )
    running.wait_ready()
    yield running
    running.close()


def test_serves_rest_grpc_and_metrics(server: Server) -> None:
    """One process answers REST predictions, gRPC health and Prometheus scrapes."""
    assert server.predict("triple", [1.0, 2.0]).json() == {"predictions": [3.0, 6.0]}
    assert server.health() == health_pb2.HealthCheckResponse.SERVING
    scrape = server.http.get("/monitoring/prometheus/metrics").text
    assert ':tensorflow:serving:request_count{model_name="triple",status="OK"}' in scrape


def test_threads_sharing_the_cli_servers_channel_are_all_answered(server: Server) -> None:
    """Default flags, 16 threads x 50 Predicts on one shared channel (tritonclient's and a
    shared stub's way): every call answered, none refused (REFUSED_STREAM was 89 %)."""
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    request = predict_pb2.PredictRequest()
    request.model_spec.name = "triple"
    request.inputs["x"].dtype = 1  # DT_FLOAT
    request.inputs["x"].tensor_shape.dim.add(size=1)
    request.inputs["x"].float_val.append(2.0)
    predict = prediction_service_pb2_grpc.PredictionServiceStub(server.channel).Predict

    def client(_: int) -> list[str]:
        failures = []
        for _ in range(50):
            try:
                assert list(predict(request, timeout=30).outputs["y"].float_val) == [6.0]
            except grpc.RpcError as error:
                failures.append(f"{error.code().name}: {error.details()}")
        return failures

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        assert [f for failures in pool.map(client, range(16)) for f in failures] == []


def test_an_edited_config_file_is_applied_while_serving(server: Server, models: Path) -> None:
    """Adding a model to the config file serves it, without a restart."""
    root = models.parent
    python_model(root, "double", 2)
    models.write_text(
        textwrap.dedent(
            f"""
            model_config_list {{
              config {{ name: "triple" base_path: "{root / "triple"}" model_platform: "python" }}
              config {{ name: "double" base_path: "{root / "double"}" model_platform: "python" }}
            }}
            """
        )
    )
    wait_until(lambda: server.predict("double", [1.0]).status_code == 200, timeout_s=30)
    assert server.predict("double", [4.0]).json() == {"predictions": [8.0]}


def test_sigterm_turns_readiness_off_drains_and_exits_0(server: Server) -> None:
    """SIGTERM: not ready at once on REST and gRPC, still serving during the delay, then exit 0."""
    server.process.send_signal(signal.SIGTERM)
    wait_until(lambda: not server.ready(), timeout_s=5)
    assert server.health() == health_pb2.HealthCheckResponse.NOT_SERVING
    assert server.predict("triple", [1.0]).json() == {"predictions": [3.0]}  # still serving
    assert server.process.wait(timeout=30) == 0
    out = server.output()
    assert out.count("triple v1 available in") == 1  # ServerCore's line, logged once
    assert out.count("triple v1 unloaded in") == 1
    assert "SIGTERM received" in out


def test_a_second_signal_exits_at_once(models: Path) -> None:
    """A second SIGTERM during the drain ends the process immediately, non-zero."""
    running = Server(
        f"--model_config_file={models}",
        "--allow_python_code_execution",
        "--drain_delay_seconds=60",
    )
    try:
        running.wait_ready()
        running.process.send_signal(signal.SIGTERM)
        wait_until(lambda: not running.ready(), timeout_s=5)
        started = time.monotonic()
        running.process.send_signal(signal.SIGTERM)
        assert running.process.wait(timeout=10) != 0
        assert time.monotonic() - started < 10
    finally:
        running.close()


def test_a_platform_config_file_configures_the_python_platform(models: Path) -> None:
    """--platform_config_file (TF Serving's PlatformConfigMap) allows the python platform."""
    platform_config = models.parent / "platform.config"
    platform_config.write_text(
        'platform_configs { key: "python" value { source_adapter_config {'
        " [type.googleapis.com/servinglib.tfs.PythonPlatformOptions] { allow_code_execution: true }"
        " } } }"
    )
    running = Server(f"--model_config_file={models}", f"--platform_config_file={platform_config}")
    try:
        running.wait_ready()
        assert running.predict("triple", [2.0]).json() == {"predictions": [6.0]}
    finally:
        running.close()


def children(pid: int) -> set[int]:
    """The processes ``pid`` started (from every one of its threads)."""
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").iterdir():
        found.update(int(child) for child in (task / "children").read_text().split())
    return found


def test_savedmodels_load_in_model_processes_when_the_platform_config_says_so(
    tmp_path: Path,
) -> None:
    """TensorFlowPlatformOptions.model_process: the server serves TF without importing it."""
    platform_config = tmp_path / "platform.config"
    platform_config.write_text(
        'platform_configs { key: "tensorflow" value { source_adapter_config {'
        " [type.googleapis.com/servinglib.tfs.TensorFlowPlatformOptions] { model_process: true }"
        " } } }"
    )
    running = Server(
        f"--model_base_path={HALF_PLUS_TWO}",
        "--model_name=half_plus_two",
        f"--platform_config_file={platform_config}",
    )
    try:
        running.wait_ready()
        assert running.predict("half_plus_two", [1.0, 5.0]).json() == {"predictions": [3.5, 5.5]}
        maps = Path(f"/proc/{running.process.pid}/maps").read_text()
        assert "tensorflow" not in maps  # the server itself never imported TensorFlow
        model_processes = children(running.process.pid)
        assert model_processes  # the version's process, and the spare for the next load
        running.process.send_signal(signal.SIGTERM)
        assert running.process.wait(timeout=60) == 0
        wait_until(lambda: not any(os.path.exists(f"/proc/{p}") for p in model_processes))
        # The process's own log lines come out in the server's log, saying whose they are.
        assert re.search(
            r" INFO servinglib\.loaders\.tensorflow\.saved_model_loader: model process \d+: "
            r"loaded SavedModel",
            running.output(),
        )
    finally:
        running.close()


def test_a_port_in_use_fails_the_start_before_any_model_loads(tmp_path: Path) -> None:
    """A REST port that is taken: exit 1 at once, one line naming the port, no model loaded."""
    slow_model(tmp_path, "sleepy", load_delay_s=120)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = start(
            f"--model_config_file={config_of(tmp_path, 'sleepy')}",
            f"--rest_api_port={port}",
            "--rest_api_host=127.0.0.1",
        )
    assert done.returncode == 1
    assert done.stderr.splitlines()[-1] == (
        f"servinglib-server: cannot start: REST port {port} (--rest_api_port) on 127.0.0.1 is "
        "in use"
    )
    assert "loading" not in done.stderr


def test_a_second_server_on_the_grpc_port_fails_to_start(models: Path) -> None:
    """Two servers on one gRPC port: the second exits 1 naming the port, the first serves on."""
    first = Server(f"--model_config_file={models}", "--allow_python_code_execution")
    try:
        first.wait_ready()
        second = Server(
            f"--model_config_file={models}",
            "--allow_python_code_execution",
            f"--port={first.grpc_port}",
        )
        try:
            assert second.process.wait(timeout=60) == 1
            assert (
                f"cannot start: gRPC port {first.grpc_port} (--port) on 127.0.0.1 is in use"
                in second.output()
            )
        finally:
            second.close()
        assert first.health() == health_pb2.HealthCheckResponse.SERVING
    finally:
        first.close()


def test_the_grpc_port_is_not_shared(server: Server) -> None:
    """The gRPC port is bound without SO_REUSEPORT, so no later socket can share it."""
    with socket.socket() as intruder:
        intruder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        with pytest.raises(OSError, match="in use"):
            intruder.bind(("127.0.0.1", server.grpc_port))


def test_a_bad_config_file_fails_the_start_with_one_line(tmp_path: Path) -> None:
    """A config file that does not parse: exit status 1 and one line naming the problem."""
    config = tmp_path / "models.config"
    config.write_text("model_config_list { config { nme: 'x' } }")
    done = subprocess.run(
        [sys.executable, "-m", "servinglib", f"--model_config_file={config}", "--port=0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    lines = [line for line in done.stderr.splitlines() if line.startswith("servinglib-server")]
    assert len(lines) == 1
    assert "nme" in lines[0]


@pytest.mark.skipif(os.environ.get("SERVINGLIB_SKIP_TF") == "1", reason="TensorFlow not wanted")
def test_demo_serves_the_bundled_models() -> None:
    """--demo (the README's serve command) serves half_plus_two and its Python twin."""
    running = Server("--demo")
    try:
        running.wait_ready()
        assert running.predict("half_plus_two", [1.0, 2.0, 5.0]).json() == {
            "predictions": [3.5, 4.0, 5.5]
        }
        assert running.predict("python_half_plus_two", [2.0]).json() == {"predictions": [3.0]}
        running.process.send_signal(signal.SIGINT)
        assert running.process.wait(timeout=30) == 0
        assert "Try: curl" in running.output()
    finally:
        running.close()


SLOW_MODEL_PY = """
import time
from pathlib import Path
from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec

class Model(PythonModel):
    def load(self, path):
        self.calls = Path(path) / "calls"
        self.calls.mkdir(exist_ok=True)
        delay = Path(path) / "LOAD_DELAY"
        if delay.exists():
            time.sleep(float(delay.read_text()))
        if (Path(path) / "BROKEN").exists():
            raise ValueError("this version is broken")

    @signature(name="serving_default", inputs=[TensorSpec("x", "float32", [-1])],
               outputs=[TensorSpec("y", "float32", [-1])])
    def predict(self, x):
        (self.calls / str(time.monotonic_ns())).write_text("")  # the test sees calls in flight
        time.sleep(float(x[0]) if len(x) else 0.0)
        return {"y": x}
"""


def slow_model(root: Path, name: str, *, broken: bool = False, load_delay_s: float = 0) -> Path:
    flags = {"BROKEN": ""} if broken else {}
    if load_delay_s:
        flags["LOAD_DELAY"] = str(load_delay_s)
    return write_python_model(root, name, SLOW_MODEL_PY, files=flags)


def config_of(root: Path, *names: str) -> Path:
    config = root / "models.config"
    entries = "".join(
        f'config {{ name: "{n}" base_path: "{root / n}" model_platform: "python" }}\n'
        for n in names
    )
    config.write_text(f"model_config_list {{\n{entries}}}\n")
    return config


def start(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "servinglib", "--port=0", "--allow_python_code_execution", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_sigterm_lets_requests_in_flight_finish(tmp_path: Path) -> None:
    """Requests running when SIGTERM arrives all complete, and the process exits 0."""
    slow_model(tmp_path, "slow")
    running = Server(
        f"--model_config_file={config_of(tmp_path, 'slow')}",
        "--allow_python_code_execution",
        "--shutdown_grace_seconds=20",
    )
    try:
        running.wait_ready()
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            calls = [pool.submit(running.predict, "slow", [1.0]) for _ in range(4)]
            calls_dir = tmp_path / "slow" / "1" / "calls"
            wait_until(lambda: len(list(calls_dir.iterdir())) == 4, timeout_s=10)
            running.process.send_signal(signal.SIGTERM)
            assert [c.result(timeout=30).status_code for c in calls] == [200] * 4
        assert running.process.wait(timeout=30) == 0
    finally:
        running.close()


def test_a_model_failing_at_start_exits_1_naming_it(tmp_path: Path) -> None:
    """A model that does not load fails the start with one line naming it."""
    slow_model(tmp_path, "good")
    slow_model(tmp_path, "bad", broken=True)
    done = start(
        f"--model_config_file={config_of(tmp_path, 'good', 'bad')}", "--max_num_load_retries=0"
    )
    assert done.returncode == 1
    assert "cannot start" in done.stderr
    assert "bad" in done.stderr
    assert "Traceback" not in done.stderr


def test_start_degraded_serves_the_healthy_models(tmp_path: Path) -> None:
    """With --start_degraded the healthy model serves and the failed one is reported."""
    slow_model(tmp_path, "good")
    slow_model(tmp_path, "bad", broken=True)
    running = Server(
        f"--model_config_file={config_of(tmp_path, 'good', 'bad')}",
        "--allow_python_code_execution",
        "--start_degraded",
        "--max_num_load_retries=0",
    )
    try:
        wait_until(
            lambda: running.http_ok("/v1/models/good") or running.process.poll() is not None,
            timeout_s=60,
        )
        assert running.predict("good", [0.0]).status_code == 200
        assert running.predict("bad", [0.0]).status_code in {404, 503}
    finally:
        running.close()


def test_a_missing_base_path_exits_1(tmp_path: Path) -> None:
    """A model whose base path does not exist fails the start with one clear line."""
    done = start(f"--model_base_path={tmp_path / 'nowhere'}", "--model_name=m")
    assert done.returncode == 1
    assert "nowhere" in done.stderr
    assert "Traceback" not in done.stderr


def test_sigterm_while_loading_stops_cleanly(tmp_path: Path) -> None:
    """SIGTERM during the first load stops the start with a message, without a traceback."""
    slow_model(tmp_path, "sleepy", load_delay_s=30)
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "servinglib",
            "--port=0",
            "--allow_python_code_execution",
            f"--model_config_file={config_of(tmp_path, 'sleepy')}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    for line in process.stdout:
        if "sleepy v1 loading" in line:
            break
    process.send_signal(signal.SIGTERM)
    out, _ = process.communicate(timeout=60)
    assert process.returncode == 0
    assert "SIGTERM while loading models" in out
    assert "Traceback" not in out


def test_help_lists_the_flags() -> None:
    """--help prints the usage with TF Serving's flags and exits 0."""
    done = subprocess.run(
        [sys.executable, "-m", "servinglib", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0
    assert "--model_config_file" in done.stdout


def test_a_new_version_is_served_without_a_restart(server: Server, models: Path) -> None:
    """A version directory renamed into place under a base path serves, replacing the old one."""
    write_python_model(models.parent, "triple", MODEL_PY % 4, version=2)
    wait_until(lambda: server.predict("triple", [1.0]).json() == {"predictions": [4.0]}, 30)


def test_flags_serve_a_savedmodel_over_rest_and_grpc() -> None:
    """--model_name/--model_base_path serve a SavedModel; TF Serving's gRPC stub predicts."""
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    from servinglib.examples import HALF_PLUS_TWO

    running = Server("--model_name=hpt", f"--model_base_path={HALF_PLUS_TWO}")
    try:
        running.wait_ready()
        assert running.predict("hpt", [2.0]).json() == {"predictions": [4.0]}
        stub = prediction_service_pb2_grpc.PredictionServiceStub(running.channel)
        request = predict_pb2.PredictRequest()
        request.model_spec.name = "hpt"
        request.inputs["x"].dtype = 1  # DT_FLOAT
        request.inputs["x"].tensor_shape.dim.add(size=1)
        request.inputs["x"].float_val.append(2.0)
        response = stub.Predict(request, timeout=10)
        assert list(response.outputs["y"].float_val) == [4.0]
        assert response.model_spec.version.value == 2
    finally:
        running.close()


def test_a_python_model_serves_from_a_relative_base_path_alone(tmp_path: Path) -> None:
    """--model_base_path (relative) of a model.py serves it as python, saying so in one line."""
    python_model(tmp_path, "triple", 3)
    running = Server(
        "--model_name=triple",
        "--model_base_path=triple",
        "--allow_python_code_execution",
        cwd=tmp_path,
    )
    try:
        running.wait_ready()
        assert running.predict("triple", [2.0]).json() == {"predictions": [6.0]}
        running.process.send_signal(signal.SIGTERM)
        assert running.process.wait(timeout=30) == 0
        assert "Model triple: platform python (inferred from version 1's files)" in (
            running.output()
        )
    finally:
        running.close()


ROWS_OF_3_PY = """
from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec

class Model(PythonModel):
    @signature(name="serving_default", inputs=[TensorSpec("features", "float32", [-1, 3])],
               outputs=[TensorSpec("total", "float32", [-1])])
    def predict(self, features):
        return {"total": features.sum(axis=1)}
"""


def try_line(running: Server) -> str:
    """The command of the server's start-up "Try:" line (reading its output up to it)."""
    assert running.process.stdout is not None
    for line in running.process.stdout:
        if "Try: " in line:
            return line.split("Try: ", 1)[1].strip()
    raise AssertionError("the server printed no Try: line")


def run_try_line(command: str) -> int:
    """The HTTP status the command gets: run by curl when installed, else sent as curl sends it."""
    args = shlex.split(command)
    assert args[:2] == ["curl", "-d"], command
    assert len(args) == 4, command
    if shutil.which("curl") is not None:
        done = subprocess.run(
            [*args, "-s", "-o", os.devnull, "-w", "%{http_code}"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        return int(done.stdout)
    # curl -d sends the text as a form body.
    headers = {"content-type": "application/x-www-form-urlencoded"}
    return httpx.post(args[3], content=args[2], headers=headers, timeout=30).status_code


@pytest.mark.parametrize(
    "served",
    [
        pytest.param(
            "demo",
            marks=pytest.mark.skipif(
                os.environ.get("SERVINGLIB_SKIP_TF") == "1", reason="TensorFlow not wanted"
            ),
        ),
        "python_half_plus_two",
        "rows_of_3",
    ],
)
def test_the_try_line_really_succeeds(served: str, tmp_path: Path) -> None:
    """The start-up Try: line, run as printed, gets 200 from the bundled models and a [?, 3] one."""
    from servinglib.examples import PYTHON_HALF_PLUS_TWO

    if served == "demo":
        args = ["--demo"]
    elif served == "python_half_plus_two":
        args = [f"--model_base_path={PYTHON_HALF_PLUS_TWO}", "--allow_python_code_execution"]
    else:
        write_python_model(tmp_path, "m", ROWS_OF_3_PY)
        args = [f"--model_base_path={tmp_path / 'm'}", "--allow_python_code_execution"]
    running = Server(*args)
    try:
        command = try_line(running)
        assert run_try_line(command) == 200, command
        if served == "rows_of_3":
            assert '{"instances": [[1.0, 2.0, 3.0]]}' in command
    finally:
        running.close()
