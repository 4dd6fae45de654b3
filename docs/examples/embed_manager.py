"""Embed an AspiredVersionsManager: serve version 1, swap to version 2, then unload everything.

Run: .venv/bin/python docs/examples/embed_manager.py
"""

from __future__ import annotations

from servinglib import (
    AspiredVersionsManager,
    AvailabilityPreservingPolicy,
    Loader,
    ManagerOptions,
    ManagerState,
    ServableData,
    ServableId,
    ServableRequest,
    ServableStateMonitor,
    SimpleLoader,
)

TIMEOUT_S = 10.0


class Scaler:
    """A stand-in model: a servable can be any Python object."""

    def __init__(self, factor: float) -> None:
        self.factor = factor

    def predict(self, x: float) -> float:
        return self.factor * x


def version(number: int) -> ServableData[Loader]:
    """Version ``number`` of servable "m", as an item of an aspired-versions list."""
    loader = SimpleLoader(lambda: Scaler(factor=10.0 * number))
    return ServableData.of(ServableId("m", number), loader)


def wait(monitor: ServableStateMonitor, number: int, state: ManagerState) -> None:
    """Blocks until version ``number`` of "m" reaches ``state`` (or ends)."""
    reached, states = monitor.wait_until_servables_reach_state(
        [ServableRequest.specific("m", number)], state, timeout_s=TIMEOUT_S
    )
    if not reached:
        raise RuntimeError(f"version {number} did not reach {state}: {states}")


def main() -> None:
    options = ManagerOptions(num_load_threads=2, num_unload_threads=1)
    with AspiredVersionsManager(AvailabilityPreservingPolicy(), options) as manager:
        # Subscribe before asking for versions: the monitor only sees later events.
        monitor = ServableStateMonitor(manager.event_bus)

        manager.set_aspired_versions("m", [version(1)])
        wait(monitor, 1, ManagerState.AVAILABLE)
        with manager.servable_handle(ServableRequest.latest("m")) as handle:
            print(handle.id, handle.servable.predict(2.0))

        # The complete desired set is now {2}: 2 is loaded, then 1 is unloaded.
        manager.set_aspired_versions("m", [version(2)])
        wait(monitor, 2, ManagerState.AVAILABLE)
        wait(monitor, 1, ManagerState.END)
        with manager.servable_handle(ServableRequest.latest("m")) as handle:
            print(handle.id, handle.servable.predict(2.0))

        # An empty set unloads every version.
        manager.set_aspired_versions("m", [])
        wait(monitor, 2, ManagerState.END)
        print("available:", manager.list_available_servable_ids())
        monitor.close()


if __name__ == "__main__":
    main()
