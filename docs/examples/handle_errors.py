"""The errors servable_handle raises: NotFoundError for unknown servables, UnavailableError else.

Run: .venv/bin/python docs/examples/handle_errors.py
"""

from __future__ import annotations

import threading

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
from servinglib.errors import NotFoundError, ServingError, UnavailableError

TIMEOUT_S = 10.0


def try_handle(manager: AspiredVersionsManager, request: ServableRequest) -> None:
    try:
        with manager.servable_handle(request) as handle:
            print(f"{request}: got {handle.id}")
    except (NotFoundError, UnavailableError) as error:
        print(f"{request}: {error.code.name}: {error}")


def main() -> None:
    load_started, may_finish = threading.Event(), threading.Event()

    def slow_model() -> str:
        load_started.set()
        may_finish.wait(TIMEOUT_S)
        return "model m, version 1"

    loader: Loader = SimpleLoader(slow_model)
    # No manage-state thread: this example steps the manager itself with run_once().
    with AspiredVersionsManager(
        AvailabilityPreservingPolicy(),
        ManagerOptions(num_load_threads=1),
        manage_state_interval_s=None,
    ) as manager:
        monitor = ServableStateMonitor(manager.event_bus)
        try_handle(manager, ServableRequest.latest("m"))  # nothing managed yet

        manager.set_aspired_versions("m", [ServableData.of(ServableId("m", 1), loader)])
        manager.run_once()  # starts the load on the load pool
        load_started.wait(TIMEOUT_S)
        try_handle(manager, ServableRequest.latest("m"))
        try_handle(manager, ServableRequest.specific("m", 1))
        try_handle(manager, ServableRequest.specific("m", 7))

        may_finish.set()
        reached, _ = monitor.wait_until_servables_reach_state(
            [ServableRequest.specific("m", 1)], ManagerState.AVAILABLE, timeout_s=TIMEOUT_S
        )
        assert reached
        try_handle(manager, ServableRequest.latest("m"))

    # Every error is a ServingError with a status code, also the base class itself.
    assert issubclass(UnavailableError, ServingError)


if __name__ == "__main__":
    main()
