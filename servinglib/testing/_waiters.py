"""Waiting on conditions, never on sleeps."""

from __future__ import annotations

import time
from collections.abc import Callable

from servinglib.core.aspired_versions_manager import AspiredVersionsManager
from servinglib.core.servable_id import ServableId
from servinglib.core.servable_request import ServableRequest
from servinglib.core.servable_state import ManagerState
from servinglib.core.servable_state_monitor import ServableStateMonitor

DEFAULT_TIMEOUT_S = 10.0


def wait_until(
    predicate: Callable[[], bool], timeout_s: float = DEFAULT_TIMEOUT_S, message: str = ""
) -> None:
    """Returns once ``predicate()`` is true; raises TimeoutError after ``timeout_s``.

    For conditions another thread makes true; checks often (every 1 ms).
    """
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(message or f"condition not met within {timeout_s} s")
        time.sleep(0.001)


def wait_for_state(
    monitor: ServableStateMonitor,
    servable_id: ServableId,
    state: ManagerState,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> None:
    """Returns once ``servable_id`` is in ``state``; raises AssertionError if it ends elsewhere.

    Raises TimeoutError after ``timeout_s``.
    """
    reached, states = monitor.wait_until_servables_reach_state(
        [ServableRequest.from_id(servable_id)], state, timeout_s
    )
    if reached:
        return
    if servable_id in states:
        error = monitor.get_state(servable_id)
        raise AssertionError(f"servable {servable_id} ended in {states[servable_id]}: {error}")
    raise TimeoutError(f"servable {servable_id} did not reach {state} within {timeout_s} s")


def run_until(
    manager: AspiredVersionsManager,
    predicate: Callable[[], bool],
    max_steps: int = 1000,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> None:
    """Steps ``manager`` with ``run_once()`` until ``predicate()`` holds.

    Between steps that change nothing it waits briefly for loads and unloads
    running on the manager's pools.  Raises TimeoutError after ``max_steps``
    steps that changed something, or after ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    steps = 0
    while not predicate():
        if steps >= max_steps or time.monotonic() > deadline:
            raise TimeoutError(f"condition not met within {steps} steps / {timeout_s} s")
        if manager.run_once():
            steps += 1
        else:
            time.sleep(0.001)
