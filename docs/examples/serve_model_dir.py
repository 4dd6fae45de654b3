"""Serve a model directory: version 1 serves, version 2 renamed into place replaces it.

Run: .venv/bin/python docs/examples/serve_model_dir.py
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from servinglib import (
    AspiredVersionsManager,
    AvailabilityPreservingPolicy,
    Loader,
    ManagerState,
    ServableRequest,
    ServableStateMonitor,
    SimpleLoader,
)
from servinglib.sources import (
    FileSystemStoragePathSource,
    FileSystemStoragePathSourceConfig,
    ServableToMonitor,
    StoragePath,
    UnarySourceAdapter,
    connect,
)

TIMEOUT_S = 10.0
# Far longer than this example runs: the new version is picked up by a filesystem event.
POLL_S = 30.0


class Scaler:
    """A stand-in model: a scale factor read from ``factor.txt`` in the version directory."""

    def __init__(self, version_dir: Path) -> None:
        self.factor = float((version_dir / "factor.txt").read_text(encoding="utf-8"))

    def predict(self, x: float) -> float:
        return self.factor * x


class ScalerAdapter(UnarySourceAdapter[StoragePath, Loader]):
    """A version directory → a Loader of the Scaler in it.  Thread-safe."""

    def convert(self, servable_name: str, data: StoragePath) -> Loader:
        return SimpleLoader(lambda: Scaler(Path(data)))


def publish(base: Path, version: int, factor: float) -> None:
    """Writes a version safely: under a name that is not a number, then renamed into place."""
    staging = base / f"{version}.tmp"  # not a number: the source ignores it
    staging.mkdir()
    (staging / "factor.txt").write_text(str(factor), encoding="utf-8")
    staging.rename(base / str(version))  # atomic: the source sees all of it or nothing


def wait(monitor: ServableStateMonitor, number: int, state: ManagerState) -> None:
    """Blocks until version ``number`` of "m" reaches ``state`` (or ends)."""
    reached, states = monitor.wait_until_servables_reach_state(
        [ServableRequest.specific("m", number)], state, timeout_s=TIMEOUT_S
    )
    if not reached:
        raise RuntimeError(f"version {number} did not reach {state}: {states}")


def predict(manager: AspiredVersionsManager) -> None:
    with manager.servable_handle(ServableRequest.latest("m")) as handle:
        print("serving", handle.id, "predict(2.0) =", handle.servable.predict(2.0))


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "m"
        base.mkdir()
        publish(base, 1, 10.0)
        config = FileSystemStoragePathSourceConfig(
            servables=[ServableToMonitor("m", str(base))],  # policy: latest(1), the default
            file_system_poll_wait_seconds=POLL_S,
        )
        with (
            AspiredVersionsManager(AvailabilityPreservingPolicy()) as manager,
            FileSystemStoragePathSource(config) as source,
        ):
            monitor = ServableStateMonitor(manager.event_bus)
            adapter = ScalerAdapter()
            connect(adapter, manager)
            connect(source, adapter)  # polls base once, then starts polling and watching it
            wait(monitor, 1, ManagerState.AVAILABLE)
            predict(manager)

            publish(base, 2, 20.0)  # aspired: {2}; loaded, then version 1 is unloaded
            wait(monitor, 2, ManagerState.AVAILABLE)
            wait(monitor, 1, ManagerState.END)
            predict(manager)

            shutil.rmtree(base / "2")  # aspired: {1} again; loaded, then version 2 unloaded
            wait(monitor, 2, ManagerState.END)
            predict(manager)
            monitor.close()


if __name__ == "__main__":
    main()
