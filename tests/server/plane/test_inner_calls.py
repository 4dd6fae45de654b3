"""A model calling another through the DataPlane: versions, labels, deadline, no copy, counted."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import attrs
import numpy as np
import pytest

from servinglib.errors import FailedPreconditionError, NotFoundError, UnavailableError
from servinglib.model_calls import model_caller
from servinglib.server.config import ModelConfig, ModelServerConfig
from servinglib.server.model_spec import ModelSpec
from servinglib.server.plane.data_plane import DataPlane
from servinglib.server.server_core import ServerCore
from servinglib.sources.version_policy import ServableVersionPolicy
from servinglib.testing import wait_until, write_python_model
from servinglib.testing.plugin import TEST_SERVER_CORE_OPTIONS

CALLEE_PY = """
import os
import numpy as np
from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec, request_deadline

X = [TensorSpec("x", "float32", [-1])]

class Model(PythonModel):
    def load(self, path):
        self.version = int(os.path.basename(path))

    @signature(
        name="serving_default",
        inputs=X,
        outputs=[TensorSpec("y", "float32", [-1]), TensorSpec("version", "int64", [])],
    )
    def echo(self, x):
        return {"y": x, "version": np.int64(self.version)}

    @signature(inputs=X, outputs=[TensorSpec("deadline", "float64", [])])
    def deadline(self, x):
        deadline = request_deadline()
        return {"deadline": np.float64(-1.0 if deadline is None else deadline)}
"""

CALLER_PY = """
import numpy as np
from servinglib.loaders import PythonModel, signature
from servinglib.model_calls import model_caller
from servinglib.servable import ExecutionMode, TensorSpec

X = [TensorSpec("x", "float32", [-1])]
OUT = [
    TensorSpec("y", "float32", [-1]),
    TensorSpec("version", "int64", []),
    TensorSpec("same", "bool", []),
]

def answer(x, out):
    return {"y": out["y"], "version": out["version"], "same": np.bool_(out["y"] is x)}

class Model(PythonModel):
    @signature(name="serving_default", inputs=X, outputs=OUT)
    def latest(self, x):
        return answer(x, model_caller().call("callee", {"x": x}))

    @signature(inputs=X, outputs=OUT)
    def pinned(self, x):
        return answer(x, model_caller().call("callee", {"x": x}, version=1))

    @signature(inputs=X, outputs=OUT)
    def labeled(self, x):
        return answer(x, model_caller().call("callee", {"x": x}, label="stable"))

    @signature(inputs=X, outputs=OUT, execution_mode=ExecutionMode.ASYNC)
    async def awaited(self, x):
        return answer(x, await model_caller().call_async("callee", {"x": x}))

    @signature(inputs=X, outputs=OUT, execution_mode=ExecutionMode.INLINE)
    def on_the_loop(self, x):
        return answer(x, model_caller().call("callee", {"x": x}))

    @signature(inputs=X, outputs=OUT)
    def missing(self, x):
        return answer(x, model_caller().call("nobody", {"x": x}))

    @signature(inputs=X, outputs=[TensorSpec("deadline", "float64", [])])
    def deadline(self, x):
        return model_caller().call("callee", {"x": x}, signature_name="deadline")
"""

X = {"x": np.array([1.0, 2.0], np.float32)}


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[DataPlane]:
    callee = write_python_model(tmp_path, "callee", CALLEE_PY, version=1)
    write_python_model(tmp_path, "callee", CALLEE_PY, version=2)
    caller = write_python_model(tmp_path, "caller", CALLER_PY)
    config = ModelServerConfig(
        [
            ModelConfig(
                "callee",
                callee,
                "python",
                ServableVersionPolicy.all(),
                version_labels={"stable": 1},
            ),
            ModelConfig.python("caller", caller),
        ]
    )
    options = attrs.evolve(
        TEST_SERVER_CORE_OPTIONS, allow_version_labels_for_unavailable_models=True
    )
    with ServerCore(config, options) as core:
        wait_until(lambda: _available(core, ModelSpec.specific("callee", 1)))
        plane = DataPlane(core, max_workers=4)
        yield plane
        plane.close()


def _available(core: ServerCore, spec: ModelSpec) -> bool:
    try:
        core.resolve_version(spec)
    except UnavailableError:
        return False
    return True


def _infer(plane: DataPlane, signature: str, deadline: float | None = None) -> dict[str, object]:
    spec = ModelSpec.latest("caller")
    return asyncio.run(plane.infer(spec, signature, X, deadline=deadline)).outputs


def test_a_model_calls_the_latest_a_pinned_and_a_labeled_version(plane: DataPlane) -> None:
    """The callee's version follows what the call names: none (latest), a number, a label."""
    assert int(_infer(plane, "serving_default")["version"]) == 2
    assert int(_infer(plane, "pinned")["version"]) == 1
    assert int(_infer(plane, "labeled")["version"]) == 1


def test_the_callee_gets_the_callers_array_itself(plane: DataPlane) -> None:
    """The arrays are handed over as they are: the callee's output is the caller's input."""
    outputs = _infer(plane, "serving_default")
    assert bool(outputs["same"])
    np.testing.assert_array_equal(outputs["y"], X["x"])


def test_a_coroutine_model_awaits_its_callee(plane: DataPlane) -> None:
    """An ASYNC signature awaits call_async on its event loop."""
    assert int(_infer(plane, "awaited")["version"]) == 2


def test_a_blocking_call_on_the_event_loop_is_refused(plane: DataPlane) -> None:
    """A model on the event loop that calls blocking fails, naming call_async, not stalling."""
    with pytest.raises(FailedPreconditionError, match="call_async"):
        _infer(plane, "on_the_loop")


def test_the_callees_error_is_the_callers(plane: DataPlane) -> None:
    """A call of a model the server does not serve raises the lookup's NOT_FOUND."""
    with pytest.raises(NotFoundError, match="nobody"):
        _infer(plane, "missing")


def test_the_callers_deadline_is_the_callees(plane: DataPlane) -> None:
    """The callee sees the caller's request deadline."""
    deadline = time.monotonic() + 30
    assert float(_infer(plane, "deadline", deadline)["deadline"]) == deadline


def test_a_server_thread_runs_the_callee_inside_its_call(plane: DataPlane) -> None:
    """On a thread with no event loop the callee runs on that thread, the call counted once."""
    result = plane.infer_blocking(ModelSpec.latest("caller"), "pinned", X)
    assert int(result.outputs["version"]) == 1
    assert plane.running_calls() == []


def test_the_callees_calls_are_counted_in_its_statistics(plane: DataPlane) -> None:
    """Each call of the callee is one success in the callee's own statistics."""
    _infer(plane, "pinned")
    plane.infer_blocking(ModelSpec.latest("caller"), "pinned", X)
    (callee,) = plane.questions.model_statistics("callee", 1)
    assert callee.success.count == 2


def test_outside_a_served_call_there_is_no_caller() -> None:
    """model_caller() refuses outside a call a server runs."""
    with pytest.raises(FailedPreconditionError, match="inside a request"):
        model_caller()
