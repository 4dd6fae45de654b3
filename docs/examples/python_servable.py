"""Serve a Python model directory: allow the platform, connect a source, call a signature."""

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

base_path = Path(__file__).parent / "models" / "python_doubler"

bus: EventBus[ServableState] = EventBus()
monitor = ServableStateMonitor(bus)
with AspiredVersionsManager(AvailabilityPreservingPolicy(), event_bus=bus) as manager:
    # Running model.py is a trust decision: the platform must be allowed explicitly.
    adapter = default_registry.make_adapter(
        "python", PythonPlatformConfig(allow_code_execution=True)
    )
    connect(adapter, manager)
    config = FileSystemStoragePathSourceConfig(
        [ServableToMonitor("doubler", str(base_path))], file_system_poll_wait_seconds=0
    )
    with FileSystemStoragePathSource(config) as source:
        connect(source, adapter)
        wait_for_state(monitor, ServableId("doubler", 1), ManagerState.AVAILABLE)
        with manager.servable_handle(ServableRequest.latest("doubler")) as handle:
            outputs = call_signature(handle.servable, None, {"x": np.array([1, 2], np.float32)})
        print(outputs["y"])
