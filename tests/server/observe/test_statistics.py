"""Triton's statistics extension: counted by the DataPlane, read with tritonclient (HTTP, gRPC).

The servers (REST on uvicorn, gRPC on grpc.aio) run on 127.0.0.1 over one shared DataPlane,
as the CLI runs them, and tritonclient's own ``get_inference_statistics`` reads them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from tritonclient.utils import InferenceServerException

from servinglib.batching import BatchingParameters
from servinglib.servable import CallStages
from servinglib.server.config import ModelConfig, ModelServerConfig
from servinglib.server.grpc import GrpcServer, GrpcServerOptions, create_server
from servinglib.server.observe.statistics import (
    BatchStatistics,
    InferenceStatistics,
    StatisticDuration,
)
from servinglib.server.plane.data_plane import DataPlane
from servinglib.server.rest import RestServer, create_app
from servinglib.server.server_core import ServerCore, ServerCoreOptions
from servinglib.testing import write_python_model
from servinglib.testing.plugin import TEST_SERVER_CORE_OPTIONS

MODEL_PY = """
import numpy as np
from servinglib.loaders import PythonModel, signature
from servinglib.servable import ExecutionMode, TensorSpec

class Model(PythonModel):
    @signature(
        name="serving_default",
        inputs=[TensorSpec("x", "float32", [-1])],
        outputs=[TensorSpec("y", "float32", [-1])],
    )
    def predict(self, x):
        return {"y": x * 10}

    @signature(
        inputs=[TensorSpec("x", "float32", [-1])],
        outputs=[TensorSpec("y", "float32", [-1])],
        execution_mode=ExecutionMode.INLINE,
    )
    def inline(self, x):
        return {"y": x + 1}
"""


def python_model(root: Path, name: str) -> ModelConfig:
    return ModelConfig(name, str(write_python_model(root, name, MODEL_PY)), "python")


@attrs.define
class Servers:
    """REST and gRPC servers over one DataPlane, and tritonclient clients of each."""

    plane: DataPlane
    http: triton_http.InferenceServerClient
    grpc: triton_grpc.InferenceServerClient
    rest_url: str
    grpc_target: str


def serve_plane(plane: DataPlane, stops: list[Any]) -> Servers:
    """Serves ``plane`` over REST and gRPC on 127.0.0.1; appends what stops them to ``stops``."""
    rest = RestServer(create_app(plane), "127.0.0.1", 0)
    rest.start()
    stops.append(rest.stop)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def start() -> GrpcServer:
        server, _port = create_server(plane, GrpcServerOptions(host="127.0.0.1", port=0))
        await server.start()
        return server

    grpc_server = asyncio.run_coroutine_threadsafe(start(), loop).result(60)

    def stop_grpc() -> None:
        asyncio.run_coroutine_threadsafe(grpc_server.stop(0), loop).result(60)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()

    stops.append(stop_grpc)
    http = triton_http.InferenceServerClient(f"127.0.0.1:{rest.port}")
    stops.append(http.close)
    target = f"127.0.0.1:{grpc_server.port}"
    grpc_client = triton_grpc.InferenceServerClient(target)
    stops.append(grpc_client.close)
    return Servers(plane, http, grpc_client, f"http://127.0.0.1:{rest.port}", target)


@pytest.fixture
def servers_for(tmp_path: Path) -> Iterator[Any]:
    """A function serving models over both protocols with given core options; stops them after."""
    stops: list[Any] = []

    def serve(names: list[str], options: ServerCoreOptions = TEST_SERVER_CORE_OPTIONS) -> Servers:
        core = ServerCore(ModelServerConfig([python_model(tmp_path, n) for n in names]), options)
        stops.append(core.close)
        plane = DataPlane(core)
        stops.append(plane.close)
        return serve_plane(plane, stops)

    yield serve
    for stop in reversed(stops):
        stop()


def infer_http(client: triton_http.InferenceServerClient, model: str, values: list[float]) -> Any:
    tensor = triton_http.InferInput("x", [len(values)], "FP32")
    tensor.set_data_from_numpy(np.array(values, np.float32))
    return client.infer(model, [tensor])


def infer_grpc(client: triton_grpc.InferenceServerClient, model: str, values: list[float]) -> Any:
    tensor = triton_grpc.InferInput("x", [len(values)], "FP32")
    tensor.set_data_from_numpy(np.array(values, np.float32))
    return client.infer(model, [tensor])


def stats_over_both(servers: Servers, *args: str) -> list[dict[str, Any]]:
    """The ``model_stats`` list over HTTP, checked equal to gRPC's (proto3 JSON: zeros left out)."""
    over_http = servers.http.get_inference_statistics(*args)["model_stats"]
    over_grpc = servers.grpc.get_inference_statistics(*args, as_json=True)["model_stats"]
    assert [_without_zeros(s) for s in over_http] == [
        _without_zeros(_grpc_ints(s)) for s in over_grpc
    ]
    return over_http  # type: ignore[no-any-return]


def _without_zeros(value: Any) -> Any:
    """``value`` as protobuf's JSON gives it: zero numbers, empty lists and objects left out."""
    if isinstance(value, dict):
        kept = {k: _without_zeros(v) for k, v in value.items()}
        return {k: v for k, v in kept.items() if v not in (0, "", [], {})}
    if isinstance(value, list):
        return [_without_zeros(v) for v in value]
    return value


def _grpc_ints(value: Any) -> Any:
    """protobuf's JSON writes 64-bit integers as strings: back to numbers."""
    if isinstance(value, dict):
        return {
            k: int(v) if isinstance(v, str) and v.isdigit() and k != "version" else _grpc_ints(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_grpc_ints(v) for v in value]
    return value


def test_both_protocols_list_the_statistics_extension(servers_for: Any) -> None:
    """Server metadata names ``statistics`` over HTTP and gRPC, as Triton's does."""
    servers = servers_for(["m"])
    assert "statistics" in servers.http.get_server_metadata()["extensions"]
    assert "statistics" in servers.grpc.get_server_metadata().extensions


def test_requests_over_both_protocols_are_counted_once_each(servers_for: Any) -> None:
    """Successes and failures from both front ends land in one version's statistics."""
    servers = servers_for(["m", "idle"])
    before_ms = time.time_ns() // 1_000_000
    for i in range(3):
        assert infer_http(servers.http, "m", [float(i)]).as_numpy("y").tolist() == [10.0 * i]
    for _ in range(2):
        assert infer_grpc(servers.grpc, "m", [1.0, 2.0]).as_numpy("y").tolist() == [10.0, 20.0]
    bad = triton_http.InferInput("x", [1], "INT32")  # the signature takes FP32
    bad.set_data_from_numpy(np.array([1], np.int32))
    with pytest.raises(InferenceServerException, match="x"):
        servers.http.infer("m", [bad])
    after_ms = time.time_ns() // 1_000_000

    (stats,) = stats_over_both(servers, "m")
    assert (stats["name"], stats["version"]) == ("m", "1")
    assert before_ms <= stats["last_inference"] <= after_ms
    assert stats["inference_count"] == stats["execution_count"] == 5
    inference = stats["inference_stats"]
    assert inference["success"]["count"] == 5
    assert inference["fail"]["count"] == 1
    for stage in ("queue", "compute_input", "compute_infer", "compute_output"):
        assert inference[stage]["count"] == 5
        assert inference[stage]["ns"] > 0, stage
    stages_ns = sum(inference[s]["ns"] for s in ("queue", "compute_input", "compute_infer"))
    assert stages_ns <= inference["success"]["ns"]
    (batch,) = stats["batch_stats"]
    assert batch["batch_size"] == 1
    assert batch["compute_infer"] == inference["compute_infer"]

    every = stats_over_both(servers)
    assert [(s["name"], s["version"], s["inference_count"]) for s in every] == [
        ("idle", "1", 0),
        ("m", "1", 5),
    ]
    assert stats_over_both(servers, "m", "1") == [stats]


def test_inline_signatures_have_no_queue_time(servers_for: Any) -> None:
    """An INLINE call runs on the event loop: counted with zero queueing."""
    servers = servers_for(["m"])
    tensor = triton_grpc.InferInput("x", [2], "FP32")
    tensor.set_data_from_numpy(np.array([1, 2], np.float32))
    result = servers.grpc.infer("m", [tensor], parameters={"signature_name": "inline"})
    assert result.as_numpy("y").tolist() == [2.0, 3.0]
    (stats,) = stats_over_both(servers, "m")
    inference = stats["inference_stats"]
    assert inference["queue"] == {"count": 1, "ns": 0}
    assert inference["compute_infer"]["count"] == 1
    assert inference["compute_infer"]["ns"] > 0


def test_unknown_models_and_versions_are_errors_on_both(servers_for: Any) -> None:
    """A model or version the server does not know is an error for both clients, saying which."""
    servers = servers_for(["m"])
    for client in (servers.http, servers.grpc):
        with pytest.raises(InferenceServerException, match="nope"):
            client.get_inference_statistics("nope")
        with pytest.raises(InferenceServerException, match="version 9"):
            client.get_inference_statistics("m", "9")
        with pytest.raises(InferenceServerException, match="version"):
            client.get_inference_statistics("m", "x")


def test_a_batch_counts_one_execution_for_its_requests(servers_for: Any) -> None:
    """Four requests merged into one batch: four inferences, one execution of batch size 4."""
    # The batch runs only when full: the long timeout makes the merge certain.
    options = attrs.evolve(
        TEST_SERVER_CORE_OPTIONS,
        batching_parameters=BatchingParameters(
            max_batch_size=4, batch_timeout_s=60.0, num_batch_threads=1
        ),
    )
    servers = servers_for(["m"], options)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        clients = [triton_grpc.InferenceServerClient(servers.grpc_target) for _ in range(4)]
        try:
            results = list(pool.map(lambda i: infer_grpc(clients[i], "m", [float(i)]), range(4)))
        finally:
            for client in clients:
                client.close()
    assert [r.as_numpy("y").tolist() for r in results] == [[0.0], [10.0], [20.0], [30.0]]
    (stats,) = stats_over_both(servers, "m")
    assert (stats["inference_count"], stats["execution_count"]) == (4, 1)
    inference = stats["inference_stats"]
    assert inference["queue"]["count"] == 4
    assert inference["queue"]["ns"] > 0
    (batch,) = stats["batch_stats"]
    assert batch["batch_size"] == 4
    assert batch["compute_infer"]["count"] == 1
    # Each request is charged its batch's model call: four times the execution's.
    assert inference["compute_infer"]["ns"] == 4 * batch["compute_infer"]["ns"]


def test_counters_add_up_the_marks_they_are_given() -> None:
    """record_success turns a request's marks into stage durations; failures count apart."""
    statistics = InferenceStatistics()
    stages = CallStages()
    stages.queued_ns, stages.started_ns = 100, 150
    stages.infer_started_ns, stages.infer_ended_ns, stages.ended_ns = 160, 260, 265
    statistics.record_success("m", 3, 0, 1_000, stages)
    batched = CallStages()
    batched.queued_ns, batched.started_ns = 0, 10
    batched.infer_started_ns, batched.infer_ended_ns, batched.ended_ns = 20, 50, 60
    batched.batch_size = 8
    statistics.record_success("m", 3, 0, 500, batched)  # not the batch's leader: no execution
    statistics.record_failure("m", 3, 1_000, 1_070)
    (stats,) = statistics.snapshot()
    assert (stats.inference_count, stats.execution_count) == (2, 1)
    assert stats.success == StatisticDuration(2, 1_500)
    assert stats.fail == StatisticDuration(1, 70)
    assert stats.queue == StatisticDuration(2, 50)
    assert stats.compute_input == StatisticDuration(2, 20)
    assert stats.compute_infer == StatisticDuration(2, 130)
    assert stats.compute_output == StatisticDuration(2, 15)
    assert stats.batches == (
        BatchStatistics(
            1, StatisticDuration(1, 10), StatisticDuration(1, 100), StatisticDuration(1, 5)
        ),
    )
    assert statistics.snapshot([("m", 4)])[0].inference_count == 0
