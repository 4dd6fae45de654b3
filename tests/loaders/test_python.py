"""The "python" platform: model.py in a version directory, served as a Servable."""

from __future__ import annotations

import asyncio
import gc
import subprocess
import sys
import weakref
from pathlib import Path

import numpy as np
import pytest

from servinglib.core.aspired_versions_manager import AspiredVersionsManager
from servinglib.core.availability_preserving_policy import AvailabilityPreservingPolicy
from servinglib.core.basic_manager import ManagerOptions
from servinglib.core.event_bus import EventBus
from servinglib.core.loader_harness import LoadRetryOptions
from servinglib.core.servable_data import ServableData
from servinglib.core.servable_id import ServableId
from servinglib.core.servable_request import ServableRequest
from servinglib.core.servable_state import ManagerState, ServableState
from servinglib.core.servable_state_monitor import ServableStateMonitor
from servinglib.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    StatusCode,
    UnknownError,
)
from servinglib.loaders.python import (
    PythonLoader,
    PythonPlatformConfig,
    PythonServable,
    make_adapter,
)
from servinglib.servable import ExecutionMode, call_signature, call_signature_async
from servinglib.sources.target import connect
from servinglib.testing import run_until, write_python_model

HALF_PLUS_TWO = """
import numpy as np
from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec

class Model(PythonModel):
    def load(self, path):
        with open(path + "/offset.txt") as f:
            self.offset = float(f.read())
        self.unloaded = False

    def unload(self):
        self.unloaded = True

    @signature(
        name="serving_default",
        inputs=[TensorSpec("x", "float32", [-1])],
        outputs=[TensorSpec("y", "float32", [-1]), TensorSpec("doubled", "float64", [-1])],
    )
    def predict(self, x):
        return {"y": 0.5 * x + self.offset, "doubled": 2 * x}

    @signature(
        inputs=[TensorSpec("words", object, [-1])], outputs=[TensorSpec("lengths", "int64", [-1])]
    )
    def lengths(self, words):
        return {"lengths": [len(w) for w in words]}

    @signature(inputs=[TensorSpec("x", "int32", [])], outputs=[TensorSpec("y", "int32", [])])
    def boom(self, x):
        raise ValueError("the model is confused")
"""


def write_model(base: Path, version: int, source: str, offset: float = 2.0) -> Path:
    """Writes a version directory holding ``model.py`` and an ``offset.txt``."""
    files = {"offset.txt": str(offset)}
    return write_python_model(base, "m", source, version=version, files=files) / str(version)


def load(path: Path) -> tuple[PythonLoader, PythonServable]:
    loader = PythonLoader(str(path))
    loader.load()
    servable = loader.servable()
    assert isinstance(servable, PythonServable)
    return loader, servable


def test_signatures_are_read_from_the_decorated_methods(tmp_path: Path) -> None:
    """Each @signature method becomes a signature with its declared specs and mode."""
    _, servable = load(write_model(tmp_path, 1, HALF_PLUS_TWO))
    assert sorted(servable.signatures) == ["boom", "lengths", "serving_default"]
    default = servable.signatures["serving_default"]
    assert list(default.inputs) == ["x"]
    assert default.inputs["x"].dtype == np.float32
    assert default.inputs["x"].shape == (-1,)
    assert sorted(default.outputs) == ["doubled", "y"]
    assert default.execution_mode is ExecutionMode.THREAD


def test_predict_returns_outputs_in_their_declared_dtypes(tmp_path: Path) -> None:
    """A call returns every output, cast to the declared dtype."""
    _, servable = load(write_model(tmp_path, 1, HALF_PLUS_TWO, offset=3.0))
    outputs = call_signature(servable, None, {"x": np.array([1.0, 2.0], np.float32)})
    np.testing.assert_array_equal(outputs["y"], np.array([3.5, 4.0], np.float32))
    assert outputs["y"].dtype == np.float32
    assert outputs["doubled"].dtype == np.float64


def test_output_filter_and_string_inputs(tmp_path: Path) -> None:
    """String tensors arrive as bytes objects; output_filter limits the outputs."""
    _, servable = load(write_model(tmp_path, 1, HALF_PLUS_TWO))
    words = np.array([b"a", b"abc"], dtype=object)
    assert call_signature(servable, "lengths", {"words": words})["lengths"].tolist() == [1, 3]
    only_y = call_signature(servable, None, {"x": np.zeros(1, np.float32)}, ["y"])
    assert list(only_y) == ["y"]


def test_wrong_inputs_are_invalid_arguments_naming_the_tensor(tmp_path: Path) -> None:
    """Wrong dtype, shape or name: INVALID_ARGUMENT saying which tensor and what was expected."""
    _, servable = load(write_model(tmp_path, 1, HALF_PLUS_TWO))
    with pytest.raises(InvalidArgumentError, match="'x' has dtype float64, but the signature"):
        call_signature(servable, None, {"x": np.zeros(2)})
    with pytest.raises(InvalidArgumentError, match=r"'x' has shape \[2, 2\].*expects \[\?\]"):
        call_signature(servable, None, {"x": np.zeros((2, 2), np.float32)})
    with pytest.raises(InvalidArgumentError, match="Unknown input tensor 'z'"):
        call_signature(servable, None, {"z": np.zeros(2, np.float32)})
    with pytest.raises(FailedPreconditionError, match='signature key "nope" not found'):
        call_signature(servable, "nope", {})


def test_a_signature_that_raises_is_an_error_naming_it(tmp_path: Path) -> None:
    """An exception inside a signature method becomes UNKNOWN naming the signature."""
    _, servable = load(write_model(tmp_path, 1, HALF_PLUS_TWO))
    with pytest.raises(UnknownError, match="Signature 'boom' failed: ValueError: the model"):
        call_signature(servable, "boom", {"x": np.array(1, np.int32)})


def test_async_signature(tmp_path: Path) -> None:
    """An async method declared ASYNC is awaited through call_signature_async."""
    source = """
    import numpy as np
    from servinglib.loaders import PythonModel, signature
    from servinglib.servable import ExecutionMode, TensorSpec

    class Model(PythonModel):
        @signature(
            name="serving_default",
            inputs=[TensorSpec("x", "int64", [-1])],
            outputs=[TensorSpec("y", "int64", [-1])],
            execution_mode=ExecutionMode.ASYNC,
        )
        async def predict(self, x):
            return {"y": x + 1}
    """
    _, servable = load(write_model(tmp_path, 1, source))
    outputs = asyncio.run(call_signature_async(servable, None, {"x": np.arange(3)}))
    assert outputs["y"].tolist() == [1, 2, 3]
    with pytest.raises(FailedPreconditionError, match="async"):
        call_signature(servable, None, {"x": np.arange(3)})


@pytest.mark.parametrize(
    ("source", "error", "message"),
    [
        ("import nonexistent_module_xyz\n", UnknownError, "Importing .*model.py failed"),
        ("def broken(:\n", InvalidArgumentError, "Importing .*model.py failed"),
        ("class Other: pass\n", InvalidArgumentError, "no PythonModel subclass named Model"),
        (
            "from servinglib.loaders import PythonModel\nclass Model(PythonModel): pass\n",
            InvalidArgumentError,
            "declares no signatures",
        ),
        (
            "from servinglib.loaders import PythonModel\n"
            "class Model(PythonModel):\n"
            "    def load(self, path): raise OSError('weights missing')\n",
            OSError,
            "weights missing",
        ),
    ],
    ids=["import-error", "syntax-error", "no-class", "no-signatures", "load-raises"],
)
def test_broken_models_fail_to_load_clearly(
    tmp_path: Path, source: str, error: type[Exception], message: str
) -> None:
    """A model.py that cannot be imported or loaded fails the load with a clear message."""
    loader = PythonLoader(str(write_model(tmp_path, 1, source)))
    with pytest.raises(error, match=message):
        loader.load()
    assert loader._module_name not in sys.modules


def test_missing_entry_point_is_not_found(tmp_path: Path) -> None:
    """A version directory without model.py is NOT_FOUND (it may still be being copied)."""
    (tmp_path / "1").mkdir()
    with pytest.raises(NotFoundError, match=r"No model\.py"):
        PythonLoader(str(tmp_path / "1")).load()


def test_unload_calls_the_model_and_lets_it_be_collected(tmp_path: Path) -> None:
    """unload() calls the model's unload, forgets its module, and the model is collected."""
    loader, servable = load(write_model(tmp_path, 1, HALF_PLUS_TWO))
    model = servable.model
    module_name = type(model).__module__
    assert module_name in sys.modules
    watch = weakref.ref(model)
    assert model.unloaded is False  # type: ignore[attr-defined]
    loader.unload()
    assert model.unloaded is True  # type: ignore[attr-defined]
    del model, servable
    gc.collect()
    assert watch() is None
    assert module_name not in sys.modules


def test_two_versions_load_side_by_side(tmp_path: Path) -> None:
    """Versions of the same model import as separate modules and keep their own state."""
    _, one = load(write_model(tmp_path, 1, HALF_PLUS_TWO, offset=2.0))
    _, two = load(write_model(tmp_path, 2, HALF_PLUS_TWO, offset=3.0))
    x = {"x": np.array([0.0], np.float32)}
    assert call_signature(one, None, x)["y"].tolist() == [2.0]
    assert call_signature(two, None, x)["y"].tolist() == [3.0]


def manager_with(
    adapter_config: PythonPlatformConfig | None,
) -> tuple[AspiredVersionsManager, ServableStateMonitor, object]:
    bus: EventBus[ServableState] = EventBus()
    monitor = ServableStateMonitor(bus)
    manager = AspiredVersionsManager(
        AvailabilityPreservingPolicy(),
        ManagerOptions(load_retry=LoadRetryOptions(max_num_load_retries=0)),
        manage_state_interval_s=None,
        event_bus=bus,
    )
    adapter = make_adapter(adapter_config)
    connect(adapter, manager)
    return manager, monitor, adapter


def test_platform_is_refused_unless_code_execution_is_allowed(tmp_path: Path) -> None:
    """Without allow_code_execution, versions end FAILED_PRECONDITION saying how to allow it."""
    path = write_model(tmp_path, 1, HALF_PLUS_TWO)
    manager, monitor, adapter = manager_with(None)
    adapter.set_aspired_versions(  # type: ignore[attr-defined]
        "m", [ServableData.of(ServableId("m", 1), str(path))]
    )
    run_until(manager, lambda: monitor.get_state(ServableId("m", 1)) is not None)
    state = monitor.get_state(ServableId("m", 1))
    assert state is not None
    assert state.manager_state is ManagerState.END
    assert state.health is not None
    assert state.health.code is StatusCode.FAILED_PRECONDITION
    assert "allow_code_execution" in state.health.message
    manager.close()


def test_platform_serves_through_a_manager_when_allowed(tmp_path: Path) -> None:
    """With code execution allowed, the adapter's loaders serve through a manager."""
    path = write_model(tmp_path, 1, HALF_PLUS_TWO)
    manager, _, adapter = manager_with(PythonPlatformConfig(allow_code_execution=True))
    adapter.set_aspired_versions(  # type: ignore[attr-defined]
        "m", [ServableData.of(ServableId("m", 1), str(path))]
    )
    run_until(manager, lambda: manager.list_available_servable_ids() == [ServableId("m", 1)])
    with manager.servable_handle(ServableRequest.latest("m")) as handle:
        y = call_signature(handle.servable, None, {"x": np.array([2.0], np.float32)})["y"]
    assert y.tolist() == [3.0]
    manager.close()


def test_loading_a_python_model_never_imports_tensorflow(tmp_path: Path) -> None:
    """Serving a Python model in a fresh process leaves TensorFlow unimported."""
    path = write_model(tmp_path, 1, HALF_PLUS_TWO)
    script = f"""
import sys
import numpy as np
from servinglib.loaders.python import PythonLoader
from servinglib.servable import call_signature
loader = PythonLoader({str(path)!r})
loader.load()
call_signature(loader.servable(), None, {{"x": np.zeros(1, np.float32)}})
print(sorted(m for m in ("tensorflow", "keras") if m in sys.modules))
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"
