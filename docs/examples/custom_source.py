"""Write a Source: an in-memory model registry whose published versions a manager serves.

Run: .venv/bin/python docs/examples/custom_source.py
"""

from __future__ import annotations

import threading

from servinglib import (
    AspiredVersionsManager,
    AvailabilityPreservingPolicy,
    Loader,
    ManagerState,
    ServableData,
    ServableId,
    ServableRequest,
    ServableStateMonitor,
    SimpleLoader,
)
from servinglib.errors import InvalidArgumentError
from servinglib.sources import Source, UnarySourceAdapter, connect

TIMEOUT_S = 10.0


class Scaler:
    """A stand-in model: a servable can be any Python object."""

    def __init__(self, factor: float) -> None:
        self.factor = factor

    def predict(self, x: float) -> float:
        return self.factor * x


class Registry(Source[float]):
    """An in-memory model registry: each published version of a model is a scale factor.

    Every change emits the model's complete set of published versions.
    Thread-safe.
    """

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._models: dict[str, dict[int, float]] = {}  # guarded by: _lock

    def publish(self, name: str, version: int, factor: float) -> None:
        with self._lock:
            self._models.setdefault(name, {})[version] = factor
            self._emit_locked(name)

    def retire(self, name: str, version: int) -> None:
        with self._lock:
            self._models.get(name, {}).pop(version, None)
            self._emit_locked(name)

    def _emit_locked(self, name: str) -> None:
        # Emitting under _lock keeps emissions in the order of the changes:
        # an older set can never overtake a newer one.
        versions = sorted(self._models.get(name, {}).items())
        self.emit_aspired_versions(
            name, [ServableData.of(ServableId(name, v), factor) for v, factor in versions]
        )


class ScalerAdapter(UnarySourceAdapter[float, Loader]):
    """Turns a published scale factor into a Loader of a Scaler.  Thread-safe."""

    def convert(self, servable_name: str, data: float) -> Loader:
        if data <= 0:
            raise InvalidArgumentError(f"scale factor of {servable_name} must be > 0, got {data}")
        # Only build the loader here: the manager loads it later, on its own threads.
        return SimpleLoader(lambda: Scaler(data))


def settle(monitor: ServableStateMonitor, number: int, state: ManagerState) -> str:
    """Waits for version ``number`` of "m" to reach ``state`` or END; describes where it is."""
    monitor.wait_until_servables_reach_state(
        [ServableRequest.specific("m", number)], state, timeout_s=TIMEOUT_S
    )
    event = monitor.get_state(ServableId("m", number))
    assert event is not None
    health = "" if event.ok else f" ({event.health!r})"
    return f"v{number} {event.manager_state}{health}"


def main() -> None:
    registry = Registry()
    adapter = ScalerAdapter()
    # Emitted before the registry is connected: held, then delivered by connect().
    registry.publish("m", 1, 10.0)

    with AspiredVersionsManager(AvailabilityPreservingPolicy()) as manager:
        monitor = ServableStateMonitor(manager.event_bus)
        # Registry (Source[float]) → ScalerAdapter (float → Loader) → manager (Target[Loader]).
        connect(adapter, manager)
        connect(registry, adapter)
        print(settle(monitor, 1, ManagerState.AVAILABLE))

        registry.publish("m", 2, 20.0)  # aspired: {1, 2}
        print(settle(monitor, 2, ManagerState.AVAILABLE))
        registry.retire("m", 1)  # aspired: {2}; left out, version 1 is unloaded
        print(settle(monitor, 1, ManagerState.END))

        registry.publish("m", 3, -1.0)  # convert() raises: version 3 ends with that error
        print(settle(monitor, 3, ManagerState.AVAILABLE))
        with manager.servable_handle(ServableRequest.latest("m")) as handle:
            print("latest:", handle.id, handle.servable.predict(2.0))

        for number in (2, 3):  # aspired: {3}, then {}: the empty set unloads every version
            registry.retire("m", number)
        print(settle(monitor, 2, ManagerState.END))
        print("available:", manager.list_available_servable_ids())
        monitor.close()


if __name__ == "__main__":
    main()
