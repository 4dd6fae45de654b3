"""A Triton Python model's EXECUTION_MODE parameter: ``execute`` on a worker thread (the
default) or inline, on the thread that asks (the event loop too)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import numpy as np
import pytest

from servinglib.errors import InvalidArgumentError
from servinglib.loaders import PythonPlatformConfig
from servinglib.server import ModelServerConfig, ModelSpec, ServerCore, ServerCoreOptions
from servinglib.server.plane.data_plane import DataPlane
from servinglib.server.triton_repository import TritonRepository
from tests.triton.pipeline_models import write

CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "THREAD" data_type: TYPE_STRING dims: [ 1 ] } ]
"""

MODEL_PY = """
import threading
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        name = threading.current_thread().name.encode()
        return [pb_utils.InferenceResponse([pb_utils.Tensor("THREAD", np.array([name], object))])
                for _ in requests]
"""


def _parameter(value: str) -> str:
    return f'parameters {{ key: "EXECUTION_MODE" value: {{ string_value: "{value}" }} }}'


def _thread_of_execute(repository: Path, model: str) -> str:
    """The name of the thread ``model``'s execute ran on, asked from an event loop."""
    config = ModelServerConfig(TritonRepository(repository).scan().models)
    python = PythonPlatformConfig(allow_code_execution=True)
    with ServerCore(config, ServerCoreOptions(platform_configs={"python": python})) as core:
        plane = DataPlane(core)
        try:
            inputs = {"IN": np.array([1.0], np.float32)}
            result = asyncio.run(plane.infer(ModelSpec.latest(model), None, inputs))
        finally:
            plane.close()
    return bytes(result.outputs["THREAD"][0]).decode()


@pytest.mark.parametrize(
    ("extra", "on_the_loop"),
    [("", False), (_parameter("thread"), False), (_parameter("inline"), True)],
    ids=["default", "thread", "inline"],
)
def test_execute_runs_inline_only_when_the_config_says_so(
    tmp_path: Path, extra: str, on_the_loop: bool
) -> None:
    write(tmp_path, "model", CONFIG + extra, MODEL_PY)
    thread = _thread_of_execute(tmp_path, "model")
    assert (thread == threading.current_thread().name) is on_the_loop, thread


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (_parameter("fast"), r"EXECUTION_MODE must be 'thread' or 'inline', not 'fast'"),
        (
            _parameter("inline") + "\nmodel_transaction_policy { decoupled: true }",
            r"a decoupled model cannot run inline",
        ),
    ],
    ids=["unknown", "decoupled"],
)
def test_a_wrong_execution_mode_fails_the_load_naming_it(
    tmp_path: Path, extra: str, message: str
) -> None:
    write(tmp_path, "model", CONFIG + extra, MODEL_PY)
    config = ModelServerConfig(TritonRepository(tmp_path).scan().models)
    python = PythonPlatformConfig(allow_code_execution=True)
    options = ServerCoreOptions(platform_configs={"python": python})
    with pytest.raises(InvalidArgumentError, match=message), ServerCore(config, options):
        pass
