"""Serve a Python model directory: allow the platform, connect a source, call a signature."""

import tempfile
from pathlib import Path

import numpy as np

from servinglib.core import (
    AspiredVersionsManager,
    AvailabilityPreservingPolicy,
    EventBus,
    ManagerState,
    ServableId,
    ServableRequest,
    ServableState,
    ServableStateMonitor,
)
from servinglib.loaders import PythonPlatformConfig, default_registry
from servinglib.servable import call_signature
from servinglib.sources import (
    FileSystemStoragePathSource,
    FileSystemStoragePathSourceConfig,
    ServableToMonitor,
    connect,
)
from servinglib.testing import wait_for_state

MODEL_PY = """
from pathlib import Path

import numpy as np
import numpy.typing as npt

from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec


class Model(PythonModel):
    def load(self, path: str) -> None:
        self.offset = float((Path(path) / "offset.txt").read_text())

    @signature(
        name="serving_default",
        inputs=[TensorSpec("x", "float32", [-1])],
        outputs=[TensorSpec("y", "float32", [-1])],
    )
    def double(self, x: npt.NDArray[np.float32]) -> dict[str, npt.NDArray[np.float32]]:
        return {"y": 2 * x + self.offset}
"""


def write_model(base_path: Path) -> None:
    """Version 1 of the doubler: the model.py above and the offset its load() reads."""
    version = base_path / "1"
    version.mkdir(parents=True)
    (version / "model.py").write_text(MODEL_PY)
    (version / "offset.txt").write_text("0.5")


bus: EventBus[ServableState] = EventBus()
monitor = ServableStateMonitor(bus)
with (
    tempfile.TemporaryDirectory() as models,
    AspiredVersionsManager(AvailabilityPreservingPolicy(), event_bus=bus) as manager,
):
    base_path = Path(models) / "doubler"
    write_model(base_path)
    # Running model.py is a trust decision: the platform must be allowed explicitly.
    adapter = default_registry.make_adapter(
        "python", PythonPlatformConfig(allow_code_execution=True)
    )
    connect(adapter, manager)
    config = FileSystemStoragePathSourceConfig(
        [ServableToMonitor("doubler", str(base_path))], file_system_poll_wait_seconds=0
    )
    with FileSystemStoragePathSource(config) as source:
        connect(source, adapter)  # polls the base path once
        if errors := source.servable_errors():  # a missing base path, say, fails here, not later
            raise errors["doubler"]
        wait_for_state(monitor, ServableId("doubler", 1), ManagerState.AVAILABLE)
        with manager.servable_handle(ServableRequest.latest("doubler")) as handle:
            outputs = call_signature(handle.servable, None, {"x": np.array([1, 2], np.float32)})
        print(outputs["y"])
