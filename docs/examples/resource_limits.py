"""Swap versions near a RAM limit with each policy: one fails the swap, the other leaves a gap.

Run: .venv/bin/python docs/examples/resource_limits.py
"""

from __future__ import annotations

from servinglib import (
    AspiredVersionPolicy,
    AspiredVersionsManager,
    AvailabilityPreservingPolicy,
    Loader,
    ManagerState,
    ResourceAllocation,
    ResourcePreservingPolicy,
    ResourceTracker,
    ServableData,
    ServableId,
    ServableRequest,
    ServableStateMonitor,
    SimpleLoader,
)

TIMEOUT_S = 10.0
LIMIT = ResourceAllocation.ram_bytes(1_000)
# One version fits, two do not.
ESTIMATE = ResourceAllocation.ram_bytes(600)


def version(number: int) -> ServableData[Loader]:
    loader = SimpleLoader(lambda: f"m v{number}", resource_estimate=ESTIMATE)
    return ServableData.of(ServableId("m", number), loader)


def settle(monitor: ServableStateMonitor, number: int, state: ManagerState) -> str:
    """Waits for version ``number`` to reach ``state`` or END; describes where it is."""
    monitor.wait_until_servables_reach_state(
        [ServableRequest.specific("m", number)], state, timeout_s=TIMEOUT_S
    )
    event = monitor.get_state(ServableId("m", number))
    assert event is not None
    health = "" if event.ok else f" ({event.health!r})"
    return f"v{number} {event.manager_state}{health}"


def swap(policy: AspiredVersionPolicy) -> None:
    print(f"-- {type(policy).__name__}")
    tracker = ResourceTracker(LIMIT)
    with AspiredVersionsManager(policy, resource_tracker=tracker) as manager:
        monitor = ServableStateMonitor(manager.event_bus)
        manager.set_aspired_versions("m", [version(1)])
        print(settle(monitor, 1, ManagerState.AVAILABLE))

        manager.set_aspired_versions("m", [version(2)])
        print(settle(monitor, 2, ManagerState.AVAILABLE))
        print("serving:", manager.list_available_servable_ids())
        print("reserved:", tracker.statistics().used, "of", tracker.statistics().total)
        monitor.close()


def main() -> None:
    # Loads version 2 before unloading version 1: the two do not fit, so version 2 fails
    # with RESOURCE_EXHAUSTED and version 1 keeps serving.
    swap(AvailabilityPreservingPolicy())
    # Unloads version 1 first (nothing serves meanwhile), then version 2 fits.
    swap(ResourcePreservingPolicy())


if __name__ == "__main__":
    main()
