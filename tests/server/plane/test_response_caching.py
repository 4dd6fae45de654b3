"""The response cache in front of placements: hits skip the model; swaps, inputs and
parameters miss; statistics count hits and misses as Triton does, over REST and gRPC."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.grpc as triton

from servinglib.core.servable_state import ManagerState
from servinglib.request_extras import RequestExtras, request_extras_scope
from servinglib.server.config import ModelConfig, ModelServerConfig
from servinglib.server.model_spec import ModelSpec
from servinglib.server.plane.data_plane import DataPlane
from servinglib.server.plane.response_cache_config import ResponseCacheConfig
from servinglib.server.rest import RestOptions, create_app
from servinglib.server.server_core import ServerCore
from servinglib.testing import wait_until, write_python_model
from servinglib.testing.plugin import TEST_SERVER_CORE_OPTIONS
from tests.server.grpc.grpc_servers import serving

MODEL_PY = """
import itertools
import numpy as np
from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec

X = [TensorSpec("x", "float32", [-1])]

class Model(PythonModel):
    def load(self, path):
        self.calls = itertools.count(1)
        self.called = 0

    @signature(name="serving_default", inputs=X, response_cache=True,
               outputs=[TensorSpec("y", "float32", [-1]), TensorSpec("z", "float32", [-1])])
    def cached(self, x):
        self.called = next(self.calls)
        return {"y": x + OFFSET, "z": x * 2}

    @signature(inputs=[], outputs=[TensorSpec("calls", "int64", [])])
    def count(self):
        return {"calls": np.int64(self.called)}

    @signature(inputs=X, outputs=[TensorSpec("y", "float32", [-1])])
    def uncached(self, x):
        self.called = next(self.calls)
        return {"y": x}
"""

X = {"x": np.array([1.0, 2.0], np.float32)}
SPEC = ModelSpec.latest("m")


def model_source(offset: int) -> str:
    return MODEL_PY.replace("OFFSET", str(offset))


@pytest.fixture
def core(tmp_path: Path) -> Iterator[ServerCore]:
    base = write_python_model(tmp_path, "m", model_source(1))
    with ServerCore(
        ModelServerConfig([ModelConfig.python("m", base)]), TEST_SERVER_CORE_OPTIONS
    ) as core:
        yield core


@pytest.fixture
def plane(core: ServerCore) -> Iterator[DataPlane]:
    plane = DataPlane(core, max_workers=2, response_cache=ResponseCacheConfig(1 << 20))
    yield plane
    plane.close()


def calls(plane: DataPlane) -> int:
    return int(plane.infer_blocking(SPEC, "count", {}).outputs["calls"])


def test_a_hit_leaves_the_models_call_counter_unchanged(plane: DataPlane) -> None:
    """The second identical request is answered from the cache: the model is called once."""
    first = plane.infer_blocking(SPEC, None, X)
    second = asyncio.run(plane.infer(SPEC, None, X))
    assert calls(plane) == 1
    assert second.outputs["y"].tolist() == first.outputs["y"].tolist() == [2.0, 3.0]
    assert second.version == 1


def test_an_uncached_signature_runs_every_time(plane: DataPlane) -> None:
    """A signature that does not ask for the cache is called for every request."""
    plane.infer_blocking(SPEC, "uncached", X)
    plane.infer_blocking(SPEC, "uncached", X)
    assert calls(plane) == 2


@pytest.mark.parametrize(
    "other",
    [
        {"x": np.array([1.0, 2.5], np.float32)},
        {"x": np.array([1.0, 2.0, 0.0], np.float32)},
        {"x": np.array([1.0, 2.0], np.float32)[::-1].copy()},
    ],
    ids=["bytes", "shape", "order"],
)
def test_different_inputs_miss(plane: DataPlane, other: dict[str, np.ndarray]) -> None:
    """Inputs differing in bytes or shape are another key: the model runs again."""
    plane.infer_blocking(SPEC, None, X)
    plane.infer_blocking(SPEC, None, other)
    assert calls(plane) == 2


def test_parameters_and_requested_outputs_are_part_of_the_key(plane: DataPlane) -> None:
    """A request with other parameters, or asking for other outputs, misses."""
    plane.infer_blocking(SPEC, None, X)
    with request_extras_scope(RequestExtras.of_request("", {"temperature": 0.5})):
        plane.infer_blocking(SPEC, None, X)
    with request_extras_scope(RequestExtras.of_request("", {"temperature": 0.5})):
        plane.infer_blocking(SPEC, None, X)
    assert calls(plane) == 2
    only_z = plane.infer_blocking(SPEC, None, X, ["z"])
    assert set(only_z.outputs) == {"z"}
    assert calls(plane) == 3


def test_a_reloaded_version_never_serves_the_old_answers(
    core: ServerCore, plane: DataPlane, tmp_path: Path
) -> None:
    """Version 1 unloaded, its code changed and loaded again: the new code answers."""
    assert plane.infer_blocking(SPEC, None, X).outputs["y"].tolist() == [2.0, 3.0]
    config = core.config
    core.reload_config(ModelServerConfig([]))
    wait_until(lambda: not core.monitor.get_live_servable_states().get("m"), 30.0)
    (tmp_path / "m" / "1" / "model.py").write_text(model_source(100))
    core.reload_config(config)
    wait_until(lambda: _available(core), 30.0)
    assert plane.infer_blocking(SPEC, None, X).outputs["y"].tolist() == [101.0, 102.0]


def _available(core: ServerCore) -> bool:
    versions = core.model_status("m").versions
    return any(v.state is ManagerState.AVAILABLE for v in versions)


def test_without_a_cache_a_model_asking_is_warned_of_once(
    core: ServerCore, caplog: pytest.LogCaptureFixture
) -> None:
    """No --cache_config: the model runs every time and one warning names it."""
    plane = DataPlane(core, max_workers=2)
    try:
        with caplog.at_level(logging.WARNING, "servinglib.server"):
            plane.infer_blocking(SPEC, None, X)
            plane.infer_blocking(SPEC, None, X)
        assert calls(plane) == 2
    finally:
        plane.close()
    warnings = [r for r in caplog.records if "response cache" in r.getMessage()]
    assert len(warnings) == 1
    assert "Model m" in warnings[0].getMessage()


def test_statistics_count_hits_and_misses_as_triton_over_rest_and_grpc(
    plane: DataPlane,
) -> None:
    """One miss then two hits: success 3, inference and execution 1, cache_hit 2, cache_miss 1,
    the same over REST's JSON and gRPC's ModelStatistics."""
    for _ in range(3):
        plane.infer_blocking(SPEC, None, X)
    app = create_app(plane, RestOptions())

    async def rest() -> dict[str, object]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://rest.test") as c:
            reply = await c.get("/v2/models/m/versions/1/stats")
            return reply.json()["model_stats"][0]

    rest_stats = asyncio.run(rest())
    with serving(plane) as served:
        client = triton.InferenceServerClient(served.address)
        try:
            reply = client.get_inference_statistics("m", "1")
        finally:
            client.close()
    grpc_stats = reply.model_stats[0]
    inference = rest_stats["inference_stats"]
    assert isinstance(inference, dict)
    assert inference["success"]["count"] == grpc_stats.inference_stats.success.count == 3
    assert inference["cache_hit"]["count"] == grpc_stats.inference_stats.cache_hit.count == 2
    assert inference["cache_miss"]["count"] == grpc_stats.inference_stats.cache_miss.count == 1
    assert inference["cache_hit"]["ns"] == grpc_stats.inference_stats.cache_hit.ns > 0
    assert inference["cache_miss"]["ns"] == grpc_stats.inference_stats.cache_miss.ns > 0
    assert rest_stats["inference_count"] == grpc_stats.inference_count == 1
    assert (
        inference["compute_infer"]["count"] == grpc_stats.inference_stats.compute_infer.count == 1
    )
    assert inference["queue"]["count"] == grpc_stats.inference_stats.queue.count == 3
    assert rest_stats["execution_count"] == grpc_stats.execution_count == 1
    usage = plane.response_cache_usage()
    assert usage is not None
    assert (usage.hits, usage.misses, usage.entries) == ({"m": 2}, {"m": 1}, 1)
