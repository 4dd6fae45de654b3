"""Load retries: a transient failure is retried, a permanent one is not, un-aspiring cancels.

Run: .venv/bin/python docs/examples/load_retries.py
"""

from __future__ import annotations

import logging

from servinglib import (
    AspiredVersionsManager,
    AvailabilityPreservingPolicy,
    Loader,
    LoadRetryOptions,
    ManagerOptions,
    ManagerState,
    ServableData,
    ServableId,
    ServableRequest,
    ServableStateMonitor,
    SimpleLoader,
)
from servinglib.errors import DataLossError, UnavailableError

TIMEOUT_S = 10.0


class Model:
    """Fails its first ``failures`` loads with ``error``, then loads; counts attempts."""

    def __init__(self, failures: int, error: Exception) -> None:
        self.failures = failures
        self.error = error
        self.attempts = 0

    def create(self) -> str:
        self.attempts += 1
        if self.attempts <= self.failures:
            raise self.error
        return "loaded"


def item(name: str, model: Model) -> ServableData[Loader]:
    return ServableData.of(ServableId(name, 1), SimpleLoader(model.create))


def settle(monitor: ServableStateMonitor, name: str) -> str:
    """Waits until version 1 of ``name`` is AVAILABLE or has ended; describes it."""
    monitor.wait_until_servables_reach_state(
        [ServableRequest.specific(name, 1)], ManagerState.AVAILABLE, timeout_s=TIMEOUT_S
    )
    event = monitor.get_state(ServableId(name, 1))
    assert event is not None
    return f"{name}: {event.manager_state}" + ("" if event.ok else f" {event.health!r}")


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="log: %(message)s")
    # Up to 3 retries (4 attempts), 50 ms apart; the retry waits occupy no thread.
    retry = LoadRetryOptions(max_num_load_retries=3, load_retry_interval_s=0.05)
    options = ManagerOptions(num_load_threads=2, load_retry=retry)
    with AspiredVersionsManager(AvailabilityPreservingPolicy(), options) as manager:
        monitor = ServableStateMonitor(manager.event_bus)

        # Two transient failures, then success: 3 attempts.
        flaky = Model(failures=2, error=UnavailableError("storage not mounted yet"))
        manager.set_aspired_versions("flaky", [item("flaky", flaky)])
        print(settle(monitor, "flaky"), f"after {flaky.attempts} attempts")

        # DATA_LOSS cannot heal: retry_unless_permanent stops after the first attempt.
        corrupt = Model(failures=99, error=DataLossError("checkpoint is truncated"))
        manager.set_aspired_versions("corrupt", [item("corrupt", corrupt)])
        print(settle(monitor, "corrupt"), f"after {corrupt.attempts} attempt")
        monitor.close()

    # A version that is no longer aspired stops retrying at once (CANCELLED), even though
    # its next retry is a minute away.
    slow_retry = LoadRetryOptions(max_num_load_retries=5, load_retry_interval_s=60.0)
    with AspiredVersionsManager(
        AvailabilityPreservingPolicy(), ManagerOptions(load_retry=slow_retry)
    ) as manager:
        monitor = ServableStateMonitor(manager.event_bus)
        broken = Model(failures=99, error=UnavailableError("still not there"))
        manager.set_aspired_versions("broken", [item("broken", broken)])
        reached, _ = monitor.wait_until_servables_reach_state(
            [ServableRequest.specific("broken", 1)], ManagerState.LOADING, timeout_s=TIMEOUT_S
        )
        assert reached
        manager.set_aspired_versions("broken", [])
        print(settle(monitor, "broken"), f"after {broken.attempts} attempt")
        monitor.close()


if __name__ == "__main__":
    main()
