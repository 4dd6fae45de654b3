"""servinglib-server under hanging models, blocked loads and signals: nothing stalls the rest."""

from __future__ import annotations

import concurrent.futures
import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
from tensorflow_serving.apis import (
    get_model_status_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
)

from servinglib.testing import wait_until, write_python_model
from tests.server.cli.test_model_server import Server

# A model whose calls block until the test writes GO (or 120 s pass), noting each call started;
# with HOLD_LOAD beside it, its load blocks so too.
GATED_MODEL_PY = """
import time
from pathlib import Path
from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec

def wait_for(gate):
    deadline = time.monotonic() + 120
    while not gate.exists() and time.monotonic() < deadline:
        time.sleep(0.01)

class Model(PythonModel):
    def load(self, path):
        self.root = Path(path)
        (self.root / "calls").mkdir(exist_ok=True)
        if (self.root / "HOLD_LOAD").exists():
            (self.root / "LOADING").write_text("")
            wait_for(self.root / "GO")

    @signature(name="serving_default", inputs=[TensorSpec("x", "float32", [-1])],
               outputs=[TensorSpec("y", "float32", [-1])])
    def predict(self, x):
        (self.root / "calls" / str(time.monotonic_ns())).write_text("")
        wait_for(self.root / "GO")
        return {"y": x * 2}
"""

X_GRPC_TIMEOUT_S = 3.0


def gated_model(root: Path, name: str, *, answers: bool = False) -> Path:
    return (
        write_python_model(root, name, GATED_MODEL_PY, files={"GO": ""} if answers else None) / "1"
    )


def keep_gone_and_etc(root: Path) -> Path:
    """Two models that answer, an /etc-like directory without versions, and their config file."""
    for name in ("keep", "gone"):
        gated_model(root, name, answers=True)
    (root / "etc" / "conf.d").mkdir(parents=True)
    (root / "etc" / "hosts").write_text("127.0.0.1 localhost\n")
    config = root / "models.config"
    config.write_text(config_text(root, "keep", "gone"))
    return config


def config_text(root: Path, *names: str, extra: str = "") -> str:
    entries = "".join(
        f'config {{ name: "{n}" base_path: "{root / n}" model_platform: "python" }}\n'
        for n in names
    )
    return f"model_config_list {{\n{entries}{extra}}}\n"


class Process(Server):
    """A servinglib-server process (python models allowed) with REST and gRPC clients."""

    def __init__(self, *args: str) -> None:
        super().__init__("--allow_python_code_execution", *args, http_timeout_s=30)
        self.predict_rpc = prediction_service_pb2_grpc.PredictionServiceStub(self.channel).Predict

    def predict(self, model: str, value: float) -> httpx.Response:
        return self.http.post(f"/v1/models/{model}:predict", json={"instances": [value]})

    def grpc_request(self, model: str, value: float) -> predict_pb2.PredictRequest:
        request = predict_pb2.PredictRequest()
        request.model_spec.name = model
        request.inputs["x"].dtype = 1  # DT_FLOAT
        request.inputs["x"].tensor_shape.dim.add(size=1)
        request.inputs["x"].float_val.append(value)
        return request

    def metric(self, line_start: str) -> float | None:
        for line in self.http.get("/monitoring/prometheus/metrics").text.splitlines():
            if line.startswith(line_start):
                return float(line.rsplit(" ", 1)[1])
        return None


@pytest.fixture
def two_models(tmp_path: Path) -> Iterator[tuple[Process, Path]]:
    stuck = gated_model(tmp_path, "stuck")
    gated_model(tmp_path, "other", answers=True)
    config = tmp_path / "models.config"
    config.write_text(config_text(tmp_path, "stuck", "other"))
    server = Process(
        f"--model_config_file={config}",
        "--enable_metrics",
        "--rest_api_timeout_in_ms=3000",
        "--shutdown_grace_seconds=2",
    )
    try:
        server.wait_ready()
        yield server, stuck
    finally:
        (stuck / "GO").write_text("")  # lets the hanging calls end
        server.close()


def test_a_hanging_model_leaves_the_others_answered(two_models: tuple[Process, Path]) -> None:
    """64 requests hang in one model over REST and gRPC; another model answers every request."""
    server, stuck = two_models
    calls = stuck / "calls"
    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        hanging_rest = [pool.submit(server.predict, "stuck", 1.0) for _ in range(32)]
        hanging_grpc = [
            server.predict_rpc.future(server.grpc_request("stuck", 1.0), timeout=X_GRPC_TIMEOUT_S)
            for _ in range(32)
        ]
        wait_until(lambda: any(calls.iterdir()), timeout_s=30)
        for value in range(20):
            assert server.predict("other", value).json() == {"predictions": [value * 2]}
            response = server.predict_rpc(server.grpc_request("other", value), timeout=10)
            assert list(response.outputs["y"].float_val) == [value * 2]
        # The hanging model's calls hold at most its share of the pool, not every worker.
        running = len(list(calls.iterdir()))
        assert 1 <= running < 8
        assert {f.result(timeout=30).status_code for f in hanging_rest} == {504}
        for future in hanging_grpc:
            with pytest.raises(grpc.RpcError) as failure:
                future.result(timeout=30)
            assert failure.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
        # Past the deadlines: still answering, the overdue calls counted and named.
        assert server.predict("other", 3.0).json() == {"predictions": [6.0]}
        overdue = 'servinglib_model_calls_past_deadline{model_name="stuck"}'
        wait_until(lambda: server.metric(overdue) == running, timeout_s=10)
        status = server.http.get("/v1/models/stuck").json()["model_version_status"][0]["status"]
        assert status["error_code"] == "DEADLINE_EXCEEDED"
        assert status["error_message"].startswith(f"{running} call(s) still running past")
        # gRPC's GetModelStatus asks the same plane, and says the same.
        request = get_model_status_pb2.GetModelStatusRequest()
        request.model_spec.name = "stuck"
        answer = model_service_pb2_grpc.ModelServiceStub(server.channel).GetModelStatus(
            request, timeout=10
        )
        grpc_status = answer.model_version_status[0].status
        assert grpc_status.error_code == grpc.StatusCode.DEADLINE_EXCEEDED.value[0]
        assert grpc_status.error_message == status["error_message"]
        assert len(list(calls.iterdir())) == running  # the waiting ones were never run
        (stuck / "GO").write_text("")
        wait_until(lambda: server.metric(overdue) in (None, 0.0), timeout_s=30)
    server.process.send_signal(signal.SIGTERM)
    assert server.process.wait(timeout=30) == 0
    out = server.output()
    # gRPC cancels a handler at the client's deadline, which may come before the plane's timer.
    timed_out = [
        line for line in out.splitlines() if "DEADLINE_EXCEEDED (" in line or "cancelled (" in line
    ]
    assert len(timed_out) == 64
    assert all("model stuck version 1" in line for line in timed_out)
    assert all(re.search(r"deadline [23]\.\d+ s", line) for line in timed_out)
    assert out.count("still running past its deadline") == running


def test_hung_models_leave_workers_to_the_others_until_every_thread_hangs(
    tmp_path: Path,
) -> None:
    """Two models whose calls hang past their deadline each hold half the worker pool; a third
    still answers and the server stays ready. Once four hang, every thread the pool may have
    is held: readiness turns 503 (and back to 200 when their calls return)."""
    workers = min(32, 4 * (os.cpu_count() or 1))  # the DataPlane's default pool
    share = workers // 2
    hung = [gated_model(tmp_path, f"hung{i}") for i in range(4)]
    gated_model(tmp_path, "other", answers=True)
    config = tmp_path / "models.config"
    config.write_text(config_text(tmp_path, "hung0", "hung1", "hung2", "hung3", "other"))
    server = Process(f"--model_config_file={config}", "--rest_api_timeout_in_ms=1000")
    try:
        server.wait_ready()
        with concurrent.futures.ThreadPoolExecutor(4 * share) as pool:

            def hang(models: list[Path]) -> None:
                futures = [
                    pool.submit(server.predict, version.parent.name, 1.0)
                    for version in models
                    for _ in range(share)
                ]
                assert {f.result(timeout=60).status_code for f in futures} == {504}
                for version in models:
                    wait_until(lambda v=version: len(list((v / "calls").iterdir())) == share)

            hang(hung[:2])
            assert server.predict("other", 2.0).json() == {"predictions": [4.0]}
            assert server.http.get("/v2/health/ready").status_code == 200
            hang(hung[2:])
            wait_until(lambda: server.http.get("/v2/health/ready").status_code == 503)
            for version in hung:
                (version / "GO").write_text("")
            wait_until(lambda: server.http.get("/v2/health/ready").status_code == 200)
            assert server.predict("other", 3.0).json() == {"predictions": [6.0]}
    finally:
        for version in hung:
            (version / "GO").write_text("")
        server.close()


def test_a_cancelled_grpc_call_waiting_for_its_model_never_runs(
    two_models: tuple[Process, Path],
) -> None:
    """On the synchronous gRPC server, a call waiting (without a deadline) for a place in its
    model's share gives its thread up when its client cancels: it never runs the model."""
    server, stuck = two_models
    calls = stuck / "calls"
    in_flight = 'servinglib_model_requests_in_flight{model_name="stuck"}'
    futures = [server.predict_rpc.future(server.grpc_request("stuck", 1.0)) for _ in range(12)]
    # Every call has reached the server: those past the share wait for a place.
    wait_until(lambda: server.metric(in_flight) == 12, timeout_s=30)
    running = len(list(calls.iterdir()))
    assert 1 <= running < 12
    for future in futures:
        future.cancel()
    # The waiting threads see their clients gone (they ask every 50 ms) and leave.
    wait_until(lambda: server.metric(in_flight) == running, timeout_s=30)
    (stuck / "GO").write_text("")
    assert server.predict("stuck", 2.0).json() == {"predictions": [4.0]}
    assert len(list(calls.iterdir())) == running + 1  # the cancelled waiters never ran
    server.process.send_signal(signal.SIGTERM)
    assert server.process.wait(timeout=30) == 0
    assert server.output().count("signature serving_default: cancelled (") == 12 - running


def test_v2_grpc_of_another_model_answers_while_one_hangs(
    two_models: tuple[Process, Path],
) -> None:
    """KServe V2 over gRPC (tritonclient) reaches the other model while the first one hangs."""
    server, stuck = two_models
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        hanging = [pool.submit(server.predict, "stuck", 1.0) for _ in range(16)]
        wait_until(lambda: any((stuck / "calls").iterdir()), timeout_s=30)
        client = triton_grpc.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        try:
            value = triton_grpc.InferInput("x", [1], "FP32")
            value.set_data_from_numpy(np.array([4.0], np.float32))
            for _ in range(10):
                result = client.infer("other", [value], client_timeout=10)
                assert result.as_numpy("y").tolist() == [8.0]
        finally:
            client.close()
        (stuck / "GO").write_text("")
        assert {f.result(timeout=30).status_code for f in hanging} <= {200, 504}


def test_shutdown_with_a_stuck_call_ends_on_time_and_cuts_requests_off(tmp_path: Path) -> None:
    """SIGTERM with calls that never return: exit after drain + grace, 503/UNAVAILABLE, named."""
    stuck = gated_model(tmp_path, "stuck")
    config = tmp_path / "models.config"
    config.write_text(config_text(tmp_path, "stuck"))
    server = Process(
        f"--model_config_file={config}",
        "--drain_delay_seconds=1",
        "--shutdown_grace_seconds=2",
        "--max_pool_calls_per_model=2",
    )
    try:
        server.wait_ready()
        with concurrent.futures.ThreadPoolExecutor(3) as pool:
            rest = [pool.submit(server.predict, "stuck", 1.0) for _ in range(3)]
            rpcs = [
                server.predict_rpc.future(server.grpc_request("stuck", 1.0), timeout=60)
                for _ in range(3)
            ]
            wait_until(lambda: len(list((stuck / "calls").iterdir())) == 2, timeout_s=30)
            started = time.monotonic()
            server.process.send_signal(signal.SIGTERM)
            status = server.process.wait(timeout=30)
            took = time.monotonic() - started
            answers = [f.result(timeout=10) for f in rest]
            codes = []
            for rpc in rpcs:
                with pytest.raises(grpc.RpcError) as failure:
                    rpc.result(timeout=10)
                codes.append(failure.value.code())
        assert status == 3
        assert took < 1 + 2 + 5  # drain + grace + a margin for a slow machine
        assert [a.status_code for a in answers] == [503] * 3
        assert all("shutting down" in a.json()["error"] for a in answers)
        assert codes == [grpc.StatusCode.UNAVAILABLE] * 3
        out = server.output()
        # Draining, the calls that waited for the model's share took free workers (all six).
        assert out.count("model stuck version 1 signature serving_default still running") == 6
        assert "Traceback" not in out
    finally:
        (stuck / "GO").write_text("")
        server.close()


def test_sighup_re_reads_the_model_config_file(tmp_path: Path) -> None:
    """SIGHUP applies an edited config file (no polling) and the server keeps serving."""
    for name in ("first", "second"):
        gated_model(tmp_path, name, answers=True)
    config = tmp_path / "models.config"
    config.write_text(config_text(tmp_path, "first"))
    server = Process(f"--model_config_file={config}")
    try:
        server.wait_ready()
        config.write_text(config_text(tmp_path, "second"))
        server.process.send_signal(signal.SIGHUP)
        wait_until(lambda: server.predict("second", 1.0).status_code == 200, timeout_s=30)
        wait_until(lambda: server.predict("first", 1.0).status_code == 404, timeout_s=30)
        assert server.process.poll() is None
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=30) == 0
        out = server.output()
        assert f"SIGHUP received: re-reading {config}" in out
        assert f"applied model config file {config}" in out
    finally:
        server.close()


@pytest.mark.skipif(os.environ.get("SERVINGLIB_SKIP_TF") == "1", reason="TensorFlow not wanted")
def test_sighup_without_a_config_file_says_there_is_nothing_to_reload() -> None:
    """SIGHUP to a server of --model_base_path logs that nothing is reloaded, and serves on."""
    from servinglib.examples import HALF_PLUS_TWO

    server = Process("--model_name=m", f"--model_base_path={HALF_PLUS_TWO}")
    try:
        server.wait_ready()
        server.process.send_signal(signal.SIGHUP)
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=30) == 0
        assert "SIGHUP received: no --model_config_file, nothing to reload" in server.output()
    finally:
        server.close()


def test_loads_that_never_finish_block_neither_edits_nor_sigterm(tmp_path: Path) -> None:
    """A version-less directory and a hanging load: an unload still applies, SIGTERM still exits."""
    config = keep_gone_and_etc(tmp_path)
    hanging = gated_model(tmp_path, "hanging")
    (hanging / "HOLD_LOAD").write_text("")
    server = Process(
        f"--model_config_file={config}",
        "--shutdown_grace_seconds=1",
        "--num_load_threads=1",  # 0 (TF Serving's default) loads on the thread that unloads
    )
    try:
        server.wait_ready()
        config.write_text(config_text(tmp_path, "keep", "gone", "etc", "hanging"))
        server.process.send_signal(signal.SIGHUP)  # this reload waits for the hanging load
        wait_until((hanging / "LOADING").exists, timeout_s=30)
        assert server.http.get("/v1/models/etc").status_code != 404  # configured
        config.write_text(config_text(tmp_path, "keep", "etc", "hanging"))
        server.process.send_signal(signal.SIGHUP)
        wait_until(lambda: server.predict("gone", 1.0).status_code == 404, timeout_s=30)
        assert server.predict("keep", 1.0).json() == {"predictions": [2.0]}
        started = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        server.process.wait(timeout=60)
        took = time.monotonic() - started
        out = server.output()
        assert "No versions of model etc found under base path" in out
        # The hanging load keeps the models from unloading: the exit timer ends the process.
        assert took < 1 + 1 + 10 + 8, out  # grace + cut-off + unload time + a slow machine
        assert server.process.returncode == 3
        assert "in progress: hanging v1 loading" in out
    finally:
        (hanging / "GO").write_text("")
        server.close()


def test_a_version_less_directory_fails_its_load_and_holds_nothing(tmp_path: Path) -> None:
    """Loading a directory without versions fails; an unload and SIGTERM right after go through."""
    config = keep_gone_and_etc(tmp_path)
    server = Process(f"--model_config_file={config}", "--model_config_file_poll_wait_seconds=0.2")
    try:
        server.wait_ready()
        config.write_text(config_text(tmp_path, "keep", "gone", "etc"))
        wait_until(lambda: server.http.get("/v1/models/etc").status_code != 404, timeout_s=30)
        config.write_text(config_text(tmp_path, "keep", "etc"))
        wait_until(lambda: server.predict("gone", 1.0).status_code == 404, timeout_s=30)
        started = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(timeout=30) == 0
        assert time.monotonic() - started < 10
        assert "No versions of model etc found under base path" in server.output()
    finally:
        server.close()


NEVER_ENDING_PY = """
import asyncio
from pathlib import Path
from servinglib.loaders import PythonModel, signature
from servinglib.servable import ExecutionMode, TensorSpec

class Model(PythonModel):
    def load(self, path):
        self.started = Path(path) / "STARTED"

    @signature(name="serving_default", inputs=[TensorSpec("x", "float32", [-1])],
               outputs=[TensorSpec("y", "float32", [-1])], execution_mode=ExecutionMode.ASYNC)
    async def predict(self, x):
        self.started.write_text("")
        await asyncio.Event().wait()
"""


def test_a_coroutine_cut_off_at_shutdown_gets_a_json_503(tmp_path: Path) -> None:
    """An async signature still awaiting when the grace ends: JSON 503, not a plain-text 500."""
    version = write_python_model(tmp_path, "never", NEVER_ENDING_PY) / "1"
    config = tmp_path / "models.config"
    config.write_text(config_text(tmp_path, "never"))
    server = Process(f"--model_config_file={config}", "--shutdown_grace_seconds=1")
    try:
        server.wait_ready()
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            answer = pool.submit(server.predict, "never", 1.0)
            wait_until((version / "STARTED").exists, timeout_s=30)
            server.process.send_signal(signal.SIGTERM)
            response = answer.result(timeout=30)
        assert response.status_code == 503
        assert "shutting down" in response.json()["error"]
        assert server.process.wait(timeout=30) == 3
    finally:
        server.close()
