"""End to end: FileSystemStoragePathSource → adapter → AspiredVersionsManager, all threads real."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from servinglib.core.aspired_versions_manager import AspiredVersionsManager
from servinglib.core.availability_preserving_policy import AvailabilityPreservingPolicy
from servinglib.core.basic_manager import ManagerOptions
from servinglib.core.event_bus import EventBus
from servinglib.core.loader import Loader
from servinglib.core.servable_id import ServableId
from servinglib.core.servable_request import ServableRequest
from servinglib.core.servable_state import ManagerState, ServableState
from servinglib.core.servable_state_monitor import ServableStateMonitor
from servinglib.errors import ServingError
from servinglib.sources import (
    FileSystemStoragePathSource,
    FileSystemStoragePathSourceConfig,
    ServableToMonitor,
    StoragePath,
    UnarySourceAdapter,
    connect,
)
from servinglib.testing import FakeClock, FakeLoader, wait_for_state, wait_until

TIMEOUT_S = 10.0
V1 = ServableId("m", 1)
V2 = ServableId("m", 2)


class RecordingFakeLoaderAdapter(UnarySourceAdapter[StoragePath, Loader]):
    """Makes a FakeLoader serving each version's path, and keeps them for inspection."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self.loaders: dict[tuple[str, StoragePath], FakeLoader] = {}  # guarded by: _lock

    def convert(self, servable_name: str, data: StoragePath) -> Loader:
        loader = FakeLoader(data)
        with self._lock:
            self.loaders[servable_name, data] = loader
        return loader


class Reader:
    """Takes and releases handles to the latest ``m`` in a loop on its own thread."""

    def __init__(self, manager: AspiredVersionsManager) -> None:
        self._manager = manager
        self._stop = threading.Event()
        self.failures: list[ServingError] = []
        self.served: list[tuple[int, object]] = []  # (version, servable) each time it changes
        self.lookups = 0
        self._thread = threading.Thread(target=self._run, name="e2e-reader")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(TIMEOUT_S)
        assert not self._thread.is_alive()

    def _run(self) -> None:
        request = ServableRequest.latest("m")
        while not self._stop.is_set():
            try:
                with self._manager.servable_handle(request) as handle:
                    got = (handle.id.version, handle.servable)
            except ServingError as error:
                self.failures.append(error)
                continue
            finally:
                self.lookups += 1
            if not self.served or self.served[-1] != got:
                self.served.append(got)


class Pipeline:
    """Source → adapter → manager (1 load + 1 unload thread, manage-state thread) + monitor."""

    def __init__(self, base: Path, *, watch_filesystem_events: bool) -> None:
        self.bus: EventBus[ServableState] = EventBus()
        self.monitor = ServableStateMonitor(self.bus, max_count_log_events=100)
        self.manager = AspiredVersionsManager(
            AvailabilityPreservingPolicy(),
            ManagerOptions(num_load_threads=1, num_unload_threads=1),
            event_bus=self.bus,
        )
        self.adapter = RecordingFakeLoaderAdapter()
        self.source = FileSystemStoragePathSource(
            FileSystemStoragePathSourceConfig(
                [ServableToMonitor("m", str(base))],  # type: ignore[list-item]  # attrs converter
                file_system_poll_wait_seconds=60.0,
                watch_filesystem_events=watch_filesystem_events,
                settle_window_s=0,  # versions are renamed into place whole (see test_publishing)
            ),
            clock=FakeClock(),  # no full poll unless the test asks
        )
        connect(self.adapter, self.manager)
        connect(self.source, self.adapter)

    def log(self) -> list[tuple[int, ManagerState]]:
        return [(e.state.id.version, e.state.manager_state) for e in self.monitor.get_bounded_log()]

    def close(self) -> None:
        self.source.close()
        self.manager.close()
        self.monitor.close()


def publish(base: Path, version: int) -> Path:
    """Writes a version the safe way: under ``N.tmp``, file by file, then renamed to ``N``."""
    staging = base / f"{version}.tmp"
    (staging / "variables").mkdir(parents=True)
    for file in ["saved_model.pb", "variables/variables.index", "variables/variables.data"]:
        (staging / file).write_text(f"{file} of version {version}")
    final = base / str(version)
    staging.rename(final)
    return final


@pytest.fixture(params=["watchdog", "poll_once"])
def pickup(request: pytest.FixtureRequest) -> str:
    """How the source notices version 2: a filesystem event, or an explicit poll."""
    return str(request.param)


@pytest.fixture
def base(tmp_path: Path) -> Path:
    path = tmp_path / "models" / "m"
    path.mkdir(parents=True)
    publish(path, 1)
    return path


@pytest.fixture
def pipeline(base: Path, pickup: str) -> Iterator[Pipeline]:
    built = Pipeline(base, watch_filesystem_events=pickup == "watchdog")
    yield built
    built.close()


def test_copying_version_2_swaps_it_in_without_failing_a_request(
    base: Path, pipeline: Pipeline, pickup: str
) -> None:
    """Version 2 published next to 1 becomes available, then 1 ends; no lookup ever fails."""
    wait_for_state(pipeline.monitor, V1, ManagerState.AVAILABLE, TIMEOUT_S)
    reader = Reader(pipeline.manager)
    reader.start()
    try:
        wait_until(lambda: reader.lookups > 0, TIMEOUT_S)
        v2_path = publish(base, 2)
        if pickup == "poll_once":
            pipeline.source.poll_once()
        wait_for_state(pipeline.monitor, V2, ManagerState.AVAILABLE, TIMEOUT_S)
        wait_for_state(pipeline.monitor, V1, ManagerState.END, TIMEOUT_S)
        after_end = reader.lookups
        wait_until(lambda: reader.lookups > after_end + 100, TIMEOUT_S)
    finally:
        reader.stop()

    assert reader.failures == []
    assert reader.served[0] == (1, str(base / "1"))
    assert reader.served[-1] == (2, str(v2_path))
    assert set(reader.served) <= {(1, str(base / "1")), (2, str(v2_path))}
    assert pipeline.manager.list_available_servable_ids() == [V2]
    # Availability-preserving: version 2 serves before version 1 starts unloading.
    log = pipeline.log()
    assert log.index((2, ManagerState.AVAILABLE)) < log.index((1, ManagerState.UNLOADING))
    assert log[-1] == (1, ManagerState.END)
    old = pipeline.adapter.loaders["m", str(base / "1")]
    assert old.unload_calls == 1
    assert not old.loaded
    assert ("m", str(base / "2.tmp")) not in pipeline.adapter.loaders
    assert pipeline.source.servable_errors() == {}
    assert pipeline.source.polling
