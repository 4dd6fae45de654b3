"""ServerCore batching: versions batched as they load, warmup through queues, per-model files."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import attrs
import numpy as np
import pytest

from servinglib.batching import BatchingParameters
from servinglib.batching.batching_servable import BatchingServable
from servinglib.core.servable_id import ServableId
from servinglib.core.simple_loader import SimpleLoader
from servinglib.errors import InvalidArgumentError
from servinglib.examples import HALF_PLUS_TWO
from servinglib.loaders import PythonModel, signature
from servinglib.loaders.model_batching import BATCHING_PARAMS_FILENAME, ModelBatching
from servinglib.loaders.python import PythonServable
from servinglib.servable import ExecutionMode, TensorSpec, call_signature
from servinglib.server.config import ModelConfig, ModelServerConfig
from servinglib.server.model_spec import ModelSpec
from servinglib.server.plane.data_plane import DataPlane
from servinglib.server.server_core import ServerCore
from servinglib.server.server_core_options import ServerCoreOptions
from servinglib.testing import wait_until, write_python_model
from servinglib.testing.plugin import TEST_SERVER_CORE_OPTIONS

MODEL_PY = """
import numpy as np
from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec

class Model(PythonModel):
    @signature(
        name="serving_default",
        inputs=[TensorSpec("x", "float32", [-1])],
        outputs=[TensorSpec("y", "float32", [-1])],
    )
    def predict(self, x):
        return {"y": x * 10}
"""

PARAMS = BatchingParameters(max_batch_size=32, batch_timeout_s=0.001, num_batch_threads=2)


def python_model(root: Path, name: str, batching_params: str | None = None) -> ModelConfig:
    files = {BATCHING_PARAMS_FILENAME: batching_params} if batching_params is not None else None
    return ModelConfig.python(name, write_python_model(root, name, MODEL_PY, files=files))


def with_batching(**overrides: object) -> ServerCoreOptions:
    return attrs.evolve(TEST_SERVER_CORE_OPTIONS, batching_parameters=PARAMS, **overrides)  # type: ignore[arg-type]


def predict_many(core: ServerCore, name: str, count: int) -> list[list[float]]:
    """``count`` concurrent one-row predictions through the DataPlane, as front ends make them."""
    plane = DataPlane(core)

    async def run() -> list[list[float]]:
        calls = [
            plane.infer(ModelSpec.latest(name), None, {"x": np.array([i], np.float32)})
            for i in range(count)
        ]
        results = await asyncio.gather(*calls)
        return [r.outputs["y"].tolist() for r in results]

    try:
        return asyncio.run(run())
    finally:
        plane.close()


def queue_names(core: ServerCore) -> set[str]:
    scheduler = core.batch_scheduler
    assert scheduler is not None
    return set(scheduler.statistics())


def test_batching_is_off_by_default(tmp_path: Path) -> None:
    """Without batching parameters there is no scheduler and signatures keep their mode."""
    config = ModelServerConfig([python_model(tmp_path, "m")])
    with ServerCore(config, TEST_SERVER_CORE_OPTIONS) as core:
        assert core.batch_scheduler is None
        metadata = core.model_metadata(ModelSpec.latest("m"))
        assert metadata.signatures["serving_default"].execution_mode is ExecutionMode.THREAD


def test_loaded_versions_are_batched_and_unloaded_ones_lose_their_queue(tmp_path: Path) -> None:
    """Each version gets a queue per signature, answers right, and loses it when it unloads."""
    config = ModelServerConfig([python_model(tmp_path, "a"), python_model(tmp_path, "b")])
    with ServerCore(config, with_batching()) as core:
        assert queue_names(core) == {"a/1/serving_default", "b/1/serving_default"}
        metadata = core.model_metadata(ModelSpec.latest("a"))
        assert metadata.signatures["serving_default"].execution_mode is ExecutionMode.ASYNC
        assert predict_many(core, "a", 48) == [[10.0 * i] for i in range(48)]
        core.reload_config(ModelServerConfig([config.models[1]]))
        wait_until(lambda: queue_names(core) == {"b/1/serving_default"})


def test_per_model_files_choose_which_models_batch(tmp_path: Path) -> None:
    """With per-model parameters, only versions with a batching_params.pbtxt are batched."""
    config = ModelServerConfig(
        [
            python_model(tmp_path, "batched", "max_batch_size { value: 4 }"),
            python_model(tmp_path, "plain"),
        ]
    )
    options = with_batching(enable_per_model_batching_parameters=True)
    with ServerCore(config, options) as core:
        assert queue_names(core) == {"batched/1/serving_default"}
        assert predict_many(core, "batched", 10) == [[10.0 * i] for i in range(10)]
        assert predict_many(core, "plain", 3) == [[0.0], [10.0], [20.0]]


def test_a_bad_per_model_file_fails_only_that_model(tmp_path: Path) -> None:
    """A batching_params.pbtxt that does not parse fails its version, naming the file."""
    config = ModelServerConfig(
        [
            python_model(tmp_path, "broken", "max_batch_size { valeu: 4 }"),
            python_model(tmp_path, "fine"),
        ]
    )
    options = with_batching(enable_per_model_batching_parameters=True, start_degraded=True)
    with ServerCore(config, options) as core:
        failed = core.failed_models()
        assert set(failed) == {"broken"}
        assert BATCHING_PARAMS_FILENAME in str(failed["broken"])
        assert predict_many(core, "fine", 2) == [[0.0], [10.0]]


def test_per_model_batching_needs_batching_on() -> None:
    """Per-model parameters without batching parameters is a configuration error, no thread left."""
    options = attrs.evolve(TEST_SERVER_CORE_OPTIONS, enable_per_model_batching_parameters=True)
    before = set(threading.enumerate())
    with pytest.raises(InvalidArgumentError, match="needs batching_parameters"):
        ServerCore(None, options)
    assert set(threading.enumerate()) <= before


@pytest.fixture(scope="module")
def tf_core() -> Iterator[ServerCore]:
    """The shipped half_plus_two SavedModel (its version 2 has warmup records), batched."""
    config = ModelServerConfig([ModelConfig("half_plus_two", HALF_PLUS_TWO, "tensorflow")])
    with ServerCore(config, with_batching()) as core:
        yield core


def test_a_savedmodel_is_served_through_the_batching_session(tf_core: ServerCore) -> None:
    """The real SavedModel answers 64 concurrent requests right, in shared calls, after a warmup."""
    core = tf_core
    scheduler = core.batch_scheduler
    assert scheduler is not None
    stats = scheduler.statistics()["half_plus_two/2/serving_default"]
    assert stats.batches_run >= 1  # the version's warmup records went through the queue
    results = predict_many(core, "half_plus_two", 64)
    assert results == [[0.5 * i + 3.0] for i in range(64)]  # version 2: y = 0.5x + 3
    # A batch's totals are recorded after its requests complete: wait for the last one's.
    queue = "half_plus_two/2/serving_default"
    wait_until(lambda: scheduler.statistics()[queue].rows_run - stats.rows_run >= 64)
    after = scheduler.statistics()[queue]
    assert after.rows_run - stats.rows_run == 64
    assert after.batches_run - stats.batches_run < 64  # some requests shared a call


class _Tens(PythonModel):
    @signature(
        name="serving_default",
        inputs=[TensorSpec("x", "float32", [-1])],
        outputs=[TensorSpec("y", "float32", [-1])],
    )
    def predict(self, x: np.ndarray) -> dict[str, np.ndarray]:
        return {"y": x * 10}


def test_a_custom_loader_is_batched_the_same_way() -> None:
    """A Loader that is no ModelLoader serves its Servable through a batching queue, and unloads."""
    unloaded: list[object] = []
    loader = SimpleLoader(lambda: PythonServable(_Tens()), on_unload=unloaded.append)
    batching = ModelBatching(PARAMS)
    try:
        wrapped = batching.wrap_loader(ServableId("custom", 1), loader)
        wrapped.load()
        served = wrapped.servable()
        assert isinstance(served, BatchingServable)
        assert set(batching.scheduler.statistics()) == {"custom/1/serving_default"}
        y = call_signature(served, None, {"x": np.array([1.5], np.float32)})["y"]
        assert y.tolist() == [15.0]
        wrapped.unload()
        assert len(unloaded) == 1
        assert set(batching.scheduler.statistics()) == set()
    finally:
        batching.close()


def test_a_custom_loaders_own_object_is_served_as_it_is() -> None:
    """A custom Loader whose servable is not a Servable is served unbatched, untouched."""
    thing = {"a": "lookup table"}
    batching = ModelBatching(PARAMS)
    try:
        wrapped = batching.wrap_loader(ServableId("table", 1), SimpleLoader(lambda: thing))
        wrapped.load()
        assert wrapped.servable() is thing
        wrapped.unload()
    finally:
        batching.close()
