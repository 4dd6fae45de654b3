"""Models registered and loaded on their first request, evicted least recently used under a
memory budget, over both protocols with the official clients."""

from __future__ import annotations

import concurrent.futures
import threading
from pathlib import Path

import attrs
import grpc
import httpx
import numpy as np
import pytest
import tritonclient.grpc as triton
from on_demand_models import (
    WAIT_S,
    Residents,
    Served,
    estimate_bytes,
    hooks,
    on_demand_core,
    serving,
    write_models,
)
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc
from tritonclient.utils import InferenceServerException

from servinglib.core.servable_state import ManagerState
from servinglib.server.observe.metrics import ServerMetrics
from servinglib.server.plane.repository_index import repository_index
from servinglib.testing import wait_until


def rest_predict(served: Served, name: str, value: float = 1.0) -> httpx.Response:
    """A TF Serving REST predict of ``name`` with one instance."""
    return httpx.post(
        f"{served.rest_url}/v1/models/{name}:predict", json={"instances": [value]}, timeout=WAIT_S
    )


def rest_v2_infer(served: Served, name: str, value: float = 1.0) -> httpx.Response:
    """A KServe V2 REST infer of ``name`` with one element."""
    body = {"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [value]}]}
    return httpx.post(f"{served.rest_url}/v2/models/{name}/infer", json=body, timeout=WAIT_S)


def grpc_predict(channel: grpc.Channel, name: str, timeout_s: float = WAIT_S) -> float:
    """A TF Serving gRPC Predict of ``name`` with x = [1]; its y."""
    request = predict_pb2.PredictRequest()
    request.model_spec.name = name
    request.inputs["x"].dtype = 1  # DT_FLOAT
    request.inputs["x"].tensor_shape.dim.add().size = 1
    request.inputs["x"].float_val.append(1.0)
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    return float(stub.Predict(request, timeout=timeout_s).outputs["y"].float_val[0])


def triton_inputs() -> list[triton.InferInput]:
    """x = [1] for tritonclient."""
    x = triton.InferInput("x", [1], "FP32")
    x.set_data_from_numpy(np.array([1.0], np.float32))
    return [x]


def loaded(served: Served) -> set[str]:
    """The models with an AVAILABLE version, as status reports them."""
    core = served.plane.core
    return {
        name
        for name in core.list_models()
        if any(v.state is ManagerState.AVAILABLE for v in core.model_status(name).versions)
    }


def test_registered_models_are_listed_unavailable_and_the_server_is_ready(tmp_path: Path) -> None:
    """Models on demand are not loaded at start; the server is ready; status says END with an
    error saying it loads on demand, the V2 index UNAVAILABLE with that reason."""
    with hooks() as counted, on_demand_core(write_models(tmp_path, 3), budget_bytes=None) as core:
        assert core.ready()
        assert not counted.loads
        with serving(core) as served:
            status = httpx.get(f"{served.rest_url}/v1/models/m1", timeout=WAIT_S).json()
            (version,) = status["model_version_status"]
            assert version["state"] == "END"
            assert version["status"]["error_code"] == "UNAVAILABLE"
            assert "loads on demand" in version["status"]["error_message"]
            index = httpx.post(f"{served.rest_url}/v2/repository/index", timeout=WAIT_S).json()
            assert [(e["name"], e["state"]) for e in index] == [
                ("m0", "UNAVAILABLE"),
                ("m1", "UNAVAILABLE"),
                ("m2", "UNAVAILABLE"),
            ]
            assert all("loads on demand" in e["reason"] for e in index)
            ready = httpx.get(f"{served.rest_url}/v2/health/ready", timeout=WAIT_S)
            assert ready.status_code == 200


def test_round_robin_over_both_protocols_keeps_two_loaded_and_evicts_the_lru(
    tmp_path: Path,
) -> None:
    """A budget for two of five models, requests in turn over REST and gRPC: each answered,
    never more than two loaded, and each load unloads the least recently used model."""
    models = write_models(tmp_path, 5)
    residents = Residents()
    budget = int(estimate_bytes(models[0]) * 2.5)
    with (
        hooks(),
        on_demand_core(models, budget_bytes=budget, residents=residents) as core,
        serving(core) as served,
        grpc.insecure_channel(served.grpc_address) as channel,
        triton.InferenceServerClient(served.grpc_address) as client,
    ):
        for turn in range(15):
            name = f"m{turn % 5}"
            match turn % 4:
                case 0:
                    assert rest_predict(served, name).json() == {"predictions": [1.0 + turn % 5]}
                case 1:
                    data = rest_v2_infer(served, name).json()["outputs"][0]["data"]
                    assert data == [1.0 + turn % 5]
                case 2:
                    assert grpc_predict(channel, name) == 1.0 + turn % 5
                case _:
                    answer = client.infer(name, triton_inputs(), client_timeout=WAIT_S)
                    assert answer.as_numpy("y").tolist() == [1.0 + turn % 5]
            assert len(loaded(served)) <= 2
        assert residents.most == 2
        # Round robin over five with room for two: each load unloads the one used longest ago.
        expected = [f"m{turn % 5}" for turn in range(13)]
        wait_until(lambda: len(residents.unloaded) == 13, WAIT_S)
        assert residents.unloaded == expected
        assert loaded(served) == {"m3", "m4"}


def test_a_model_held_by_a_slow_call_is_not_evicted(tmp_path: Path) -> None:
    """The least recently used model has a call running: the next load unloads the other one."""
    models = write_models(tmp_path, 3)
    budget = int(estimate_bytes(models[0]) * 2.5)
    with (
        hooks() as counted,
        on_demand_core(models, budget_bytes=budget) as core,
        serving(core) as served,
    ):
        assert rest_predict(served, "m0").status_code == 200
        counted.call_gates["m0"] = threading.Event()
        counted.calls_entered["m0"].clear()
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            slow = pool.submit(rest_predict, served, "m0")
            assert counted.calls_entered["m0"].wait(WAIT_S)
            assert rest_predict(served, "m1").status_code == 200  # m0 is now the LRU
            assert rest_predict(served, "m2").status_code == 200  # must unload m1, not m0
            wait_until(lambda: loaded(served) == {"m0", "m2"}, WAIT_S)
            counted.call_gates["m0"].set()
            assert slow.result(WAIT_S).json() == {"predictions": [1.0]}
        assert counted.load_count("m0") == 1


@pytest.mark.parametrize("grpc_server", ["sync", "aio"])
def test_eight_concurrent_requests_for_a_cold_model_share_one_load(
    tmp_path: Path, grpc_server: str
) -> None:
    """Eight requests on one shared channel while the model loads: one load, eight answers."""
    with (
        hooks() as counted,
        on_demand_core(write_models(tmp_path, 1), budget_bytes=None) as core,
        serving(core, grpc_server=grpc_server) as served,
        triton.InferenceServerClient(served.grpc_address) as client,
    ):
        counted.load_gates["m0"] = threading.Event()
        answers: concurrent.futures.Future[list[object]] = concurrent.futures.Future()
        results: list[object] = []
        lock = threading.Lock()

        def done(result: object, error: object) -> None:
            with lock:
                results.append(error if error is not None else result.as_numpy("y").tolist())  # type: ignore[attr-defined]
                if len(results) == 8:
                    answers.set_result(results)

        for _ in range(8):
            client.async_infer("m0", triton_inputs(), done, client_timeout=WAIT_S)
        wait_until(lambda: served.plane.requests_in_flight().get("m0") == 8, WAIT_S)
        counted.load_gates["m0"].set()
        assert answers.result(WAIT_S) == [[1.0]] * 8
        assert counted.load_count("m0") == 1


def test_a_deadline_shorter_than_the_load_fails_and_the_next_request_finds_it_loaded(
    tmp_path: Path,
) -> None:
    """A gRPC deadline and a REST timeout shorter than the load: DEADLINE_EXCEEDED and 504;
    the load goes on, and the next request is answered by it (one load)."""
    with (
        hooks() as counted,
        on_demand_core(write_models(tmp_path, 2), budget_bytes=None) as core,
        serving(core, rest_timeout_s=0.2) as served,
        grpc.insecure_channel(served.grpc_address) as channel,
    ):
        counted.load_gates["m0"] = threading.Event()
        with pytest.raises(grpc.RpcError) as raised:
            grpc_predict(channel, "m0", timeout_s=0.2)
        assert raised.value.code() is grpc.StatusCode.DEADLINE_EXCEEDED
        response = rest_predict(served, "m0")
        assert response.status_code == 504
        assert "loads on demand" in response.json()["error"]
        counted.load_gates["m0"].set()
        wait_until(lambda: loaded(served) == {"m0"}, WAIT_S)
        assert grpc_predict(channel, "m0") == 1.0
        assert counted.load_count("m0") == 1


def test_a_pinned_model_is_never_evicted(tmp_path: Path) -> None:
    """m0 pinned (load_on_demand=False) loads at start and stays while others come and go."""
    models = write_models(tmp_path, 4)
    models[0] = attrs.evolve(models[0], load_on_demand=False)
    residents = Residents()
    budget = int(estimate_bytes(models[0]) * 2.5)
    with (
        hooks() as counted,
        on_demand_core(models, budget_bytes=budget, residents=residents) as core,
        serving(core) as served,
    ):
        assert loaded(served) == {"m0"}
        for turn in range(6):
            name = f"m{1 + turn % 3}"
            assert rest_predict(served, name).json() == {"predictions": [2.0 + turn % 3]}
        assert rest_predict(served, "m0").json() == {"predictions": [1.0]}
        assert "m0" not in residents.unloaded
        assert len(residents.unloaded) == 5
        assert counted.load_count("m0") == 1


def test_a_model_bigger_than_the_budget_fails_resource_exhausted(tmp_path: Path) -> None:
    """A model whose estimate exceeds the budget: RESOURCE_EXHAUSTED (429) naming both."""
    small = write_models(tmp_path / "small", 1)
    big = write_models(tmp_path / "big", 2, padding_bytes=1_000_000)[1:]
    budget = int(estimate_bytes(small[0]) * 2.5)
    with (
        hooks() as counted,
        on_demand_core(small + big, budget_bytes=budget) as core,
        serving(core) as served,
        triton.InferenceServerClient(served.grpc_address) as client,
    ):
        with pytest.raises(InferenceServerException) as raised:
            client.infer("m1", triton_inputs(), client_timeout=WAIT_S)
        assert raised.value.status() == "StatusCode.RESOURCE_EXHAUSTED"
        message = raised.value.message()
        assert f"{budget} bytes" in message
        assert f"{estimate_bytes(big[0])} bytes" in message
        response = rest_predict(served, "m1")
        assert response.status_code == 429
        assert rest_predict(served, "m0").status_code == 200
        assert counted.load_count("m1") == 0


def test_a_failed_load_answers_every_waiting_request_and_the_next_one_retries(
    tmp_path: Path,
) -> None:
    """Two requests wait for a load that fails: both get its error; a later request loads
    again (and, the fault gone, is answered)."""
    with (
        hooks() as counted,
        on_demand_core(write_models(tmp_path, 1), budget_bytes=None) as core,
        serving(core) as served,
    ):
        counted.load_gates["m0"] = threading.Event()
        counted.fail_loads.add("m0")
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            waiting = [pool.submit(rest_v2_infer, served, "m0") for _ in range(2)]
            wait_until(lambda: served.plane.requests_in_flight().get("m0") == 2, WAIT_S)
            counted.load_gates["m0"].set()
            for response in waiting:
                assert "cannot load" in response.result(WAIT_S).json()["error"]
        status = core.model_status("m0").versions[0]
        assert status.error is not None
        assert "last load failed" in status.error.message
        counted.fail_loads.clear()
        assert rest_v2_infer(served, "m0").json()["outputs"][0]["data"] == [1.0]
        assert counted.load_count("m0") == 2
        assert [e.state for e in repository_index(core)] == ["READY"]


def test_metrics_count_loads_evictions_cold_starts_and_residency(tmp_path: Path) -> None:
    """Three models, room for two, four requests: three loads, one eviction, three cold starts
    timed, two resident against the budget."""
    models = write_models(tmp_path, 3)
    budget = int(estimate_bytes(models[0]) * 2.5)
    metrics = ServerMetrics()
    with (
        hooks(),
        on_demand_core(models, budget_bytes=budget) as core,
        serving(core) as served,
    ):
        metrics.attach(core)
        for name in ["m0", "m1", "m2", "m2"]:
            assert rest_predict(served, name).status_code == 200
        wait_until(lambda: loaded(served) == {"m1", "m2"}, WAIT_S)
        text = metrics.render().decode()
    lines = set(text.splitlines())
    for name in ["m0", "m1", "m2"]:
        assert f'servinglib_on_demand_loads_total{{model_name="{name}",outcome="OK"}} 1.0' in lines
    assert 'servinglib_on_demand_evictions_total{model_name="m0"} 1.0' in lines
    assert "servinglib_on_demand_cold_start_seconds_count 3.0" in lines
    assert 'servinglib_resident_models{residency="resident"} 2.0' in lines
    assert 'servinglib_resident_models{residency="registered"} 1.0' in lines
    assert f"servinglib_resident_model_bytes {2 * estimate_bytes(models[0])}.0" in lines
    assert f"servinglib_model_memory_budget_bytes {budget}.0" in lines


@pytest.mark.timeout(300)
def test_a_thousand_registered_models_are_served_within_a_budget_for_twenty(
    tmp_path: Path,
) -> None:
    """1,000 registered models, room for 20, 16 threads of requests over 100 of them: every
    request answered, never more than 20 loaded."""
    models = write_models(tmp_path, 1000, padding_bytes=1000)
    residents = Residents()
    budget = int(estimate_bytes(models[0]) * 20.5)
    with (
        hooks(),
        on_demand_core(models, budget_bytes=budget, residents=residents) as core,
        serving(core) as served,
        grpc.insecure_channel(served.grpc_address) as channel,
    ):
        names = [f"m{(i * 37) % 100}" for i in range(320)]

        def ask(index: int) -> float:
            return grpc_predict(channel, names[index])

        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(ask, range(len(names))))
        assert answers == [1.0 + int(name[1:]) for name in names]
        assert residents.most <= 20
        assert core.on_demand.statistics().registered_models >= 980


@pytest.mark.parametrize("grpc_server", ["sync", "aio"])
def test_a_cold_model_answers_streams_generate_and_its_signatures_after_its_load(
    tmp_path: Path, grpc_server: str
) -> None:
    """ModelStreamInfer, REST generate and the V2 metadata-reading paths wait for a cold
    model's load as infer does, instead of answering UNAVAILABLE while it loads."""
    with (
        hooks() as counted,
        on_demand_core(write_models(tmp_path, 3), budget_bytes=None) as core,
        serving(core, grpc_server=grpc_server) as served,
    ):
        client = triton.InferenceServerClient(served.grpc_address)
        answers: list[object] = []
        client.start_stream(callback=lambda result, error: answers.append(error or result))
        try:
            client.async_stream_infer("m1", triton_inputs())
            wait_until(lambda: answers, timeout_s=WAIT_S)
        finally:
            client.stop_stream()
            client.close()
        (answer,) = answers
        assert not isinstance(answer, InferenceServerException), answer
        generated = httpx.post(
            f"{served.rest_url}/v2/models/m2/generate",
            json={"x": [1.0]},
            timeout=WAIT_S,
        )
        assert generated.status_code == 200, generated.text
        assert generated.json()["y"] == 3.0  # m2 adds 2 (one element: a scalar)
        assert sorted(counted.loads) == ["m1", "m2"]
