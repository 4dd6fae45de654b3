"""The "tensorflow" platform end to end, and its lazy import of TensorFlow."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from servinglib.core.aspired_versions_manager import AspiredVersionsManager
from servinglib.core.availability_preserving_policy import AvailabilityPreservingPolicy
from servinglib.core.basic_manager import ManagerOptions
from servinglib.core.event_bus import EventBus
from servinglib.core.servable_id import ServableId
from servinglib.core.servable_request import ServableRequest
from servinglib.core.servable_state import ManagerState, ServableState
from servinglib.core.servable_state_monitor import ServableStateMonitor
from servinglib.examples import HALF_PLUS_TWO
from servinglib.loaders.registry import default_registry
from servinglib.loaders.tensorflow import TensorFlowPlatformConfig
from servinglib.servable import call_signature
from servinglib.sources import (
    FileSystemStoragePathSource,
    FileSystemStoragePathSourceConfig,
    ServableToMonitor,
    connect,
)
from servinglib.testing import FakeClock, run_until

X = {"x": np.array([1.0, 2.0, 5.0], np.float32)}
V1 = ServableId("half_plus_two", 1)
V2 = ServableId("half_plus_two", 2)


class Pipeline:
    """FileSystemStoragePathSource → the registry's "tensorflow" adapter → manager, by hand."""

    def __init__(self, base: Path) -> None:
        self.bus: EventBus[ServableState] = EventBus()
        self.monitor = ServableStateMonitor(self.bus)
        self.manager = AspiredVersionsManager(
            AvailabilityPreservingPolicy(),
            ManagerOptions(num_load_threads=1, num_unload_threads=1),
            manage_state_interval_s=None,
            event_bus=self.bus,
        )
        self.adapter = default_registry.make_adapter("tensorflow", TensorFlowPlatformConfig())
        self.source = FileSystemStoragePathSource(
            FileSystemStoragePathSourceConfig(
                [ServableToMonitor("half_plus_two", str(base))],  # type: ignore[list-item]  # attrs converter
                file_system_poll_wait_seconds=-1,  # polls only when told to
                watch_filesystem_events=False,
            ),
            clock=FakeClock(),
        )
        connect(self.adapter, self.manager)
        connect(self.source, self.adapter)

    def state(self, servable_id: ServableId) -> ManagerState | None:
        state = self.monitor.get_state(servable_id)
        return None if state is None else state.manager_state

    def predict(self, version: int | None = None) -> list[float]:
        request = (
            ServableRequest.latest("half_plus_two")
            if version is None
            else ServableRequest.specific("half_plus_two", version)
        )
        with self.manager.servable_handle(request) as handle:
            return call_signature(handle.servable, None, X)["y"].tolist()  # type: ignore[no-any-return]

    def close(self) -> None:
        self.source.close()
        self.manager.close()
        self.monitor.close()


def publish(source: Path, base: Path, version: int) -> None:
    """Copies a version in under a temporary name, then renames it into place."""
    staging = base / f"{version}.tmp"
    shutil.copytree(source, staging)
    staging.rename(base / str(version))


@pytest.fixture
def base(tmp_path: Path) -> Path:
    path = tmp_path / "half_plus_two"
    path.mkdir()
    publish(Path(HALF_PLUS_TWO) / "1", path, 1)
    return path


@pytest.fixture
def pipeline(base: Path) -> Iterator[Pipeline]:
    built = Pipeline(base)
    yield built
    built.close()


def test_serves_half_plus_two_and_swaps_version_1_for_2(base: Path, pipeline: Pipeline) -> None:
    """Version 1 serves; version 2 copied beside it loads (warmed up), then 1 is unloaded."""
    pipeline.source.poll_once()
    run_until(pipeline.manager, lambda: pipeline.state(V1) is ManagerState.AVAILABLE)
    assert pipeline.predict() == [2.5, 3.0, 4.5]

    with pipeline.manager.servable_handle(ServableRequest.specific("half_plus_two", 1)) as old:
        publish(Path(HALF_PLUS_TWO) / "2", base, 2)
        pipeline.source.poll_once()
        run_until(pipeline.manager, lambda: pipeline.state(V2) is ManagerState.AVAILABLE)
        assert pipeline.predict() == [3.5, 4.0, 5.5]
        # A request holding version 1 completes: the unload waits for its handle.
        assert call_signature(old.servable, None, X)["y"].tolist() == [2.5, 3.0, 4.5]
    run_until(pipeline.manager, lambda: pipeline.state(V1) is ManagerState.END)
    assert pipeline.manager.list_available_servable_ids() == [V2]
    v1_state = pipeline.monitor.get_state(V1)
    assert v1_state is not None
    assert v1_state.health is None


def test_a_broken_version_is_an_error_state_and_the_old_one_keeps_serving(
    base: Path, pipeline: Pipeline
) -> None:
    """A version 2 with a corrupt saved_model.pb ends in error; version 1 goes on serving."""
    pipeline.source.poll_once()
    run_until(pipeline.manager, lambda: pipeline.state(V1) is ManagerState.AVAILABLE)
    staging = base / "2.tmp"
    shutil.copytree(Path(HALF_PLUS_TWO) / "2", staging)
    (staging / "saved_model.pb").write_bytes(b"garbage")
    staging.rename(base / "2")
    pipeline.source.poll_once()
    run_until(pipeline.manager, lambda: pipeline.state(V2) is ManagerState.END)
    v2_state = pipeline.monitor.get_state(V2)
    assert v2_state is not None
    assert v2_state.health is not None
    assert "saved_model.pb is corrupt" in v2_state.health.message
    assert pipeline.predict() == [2.5, 3.0, 4.5]


IMPORT_PROBE = textwrap.dedent(
    """
    import sys
    import servinglib.loaders.tensorflow as platform
    from servinglib.loaders.registry import default_registry
    platform.make_adapter(None)
    default_registry.make_adapter("tensorflow")
    print(sorted(m for m in sys.modules if m == "tensorflow" or m.startswith("tensorflow.")))
    """
)


def test_importing_the_platform_does_not_import_tensorflow() -> None:
    """Importing servinglib.loaders.tensorflow and building its adapter leave TF unimported."""
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_PROBE],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
