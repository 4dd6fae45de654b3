"""Waiting on conditions, never on sleeps."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from servinglib.core.aspired_versions_manager import AspiredVersionsManager
from servinglib.core.servable_id import ServableId
from servinglib.core.servable_request import ServableRequest
from servinglib.core.servable_state import ManagerState, ServableState
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


class _HasMonitor(Protocol):
    """Anything that exposes its ServableStateMonitor, such as a ServerCore."""

    @property
    def monitor(self) -> ServableStateMonitor:
        """The monitor of the owner's lifecycle events."""
        ...


def wait_until_state(
    monitor_or_core: ServableStateMonitor | _HasMonitor,
    name: str,
    state: ManagerState,
    version: int | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> ServableId:
    """Returns the id of the version of ``name`` that reached ``state``, once one has.

    ``version`` None means any version (the highest one in ``state`` is
    returned).  ``monitor_or_core`` is a ServableStateMonitor, or anything
    with a ``monitor`` property (a ServerCore).  Raises AssertionError as
    soon as the version (for None: every version seen) ends in END instead,
    with its error, and TimeoutError after ``timeout_s``; both messages name
    the servable and its last state.
    Thread safety: any thread; blocks only the caller.
    """
    monitor = (
        monitor_or_core
        if isinstance(monitor_or_core, ServableStateMonitor)
        else monitor_or_core.monitor
    )
    request = (
        ServableRequest.latest(name) if version is None else ServableRequest.specific(name, version)
    )
    reached, settled = monitor.wait_until_servables_reach_state([request], state, timeout_s)
    if reached:
        return next(iter(settled))
    what = f"servable {name}" + (" (any version)" if version is None else f" version {version}")
    last = _last_states(monitor, name, version)
    if settled:
        raise AssertionError(f"{what} ended in END instead of reaching {state}; {last}")
    raise TimeoutError(f"{what} did not reach {state} within {timeout_s} s; {last}")


def wait_until_available(
    monitor_or_core: ServableStateMonitor | _HasMonitor,
    name: str,
    version: int | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> ServableId:
    """:func:`wait_until_state` for AVAILABLE: the id of the version that can be served."""
    return wait_until_state(monitor_or_core, name, ManagerState.AVAILABLE, version, timeout_s)


def _last_states(monitor: ServableStateMonitor, name: str, version: int | None) -> str:
    states = monitor.get_version_states(name)
    if version is not None:
        entry = states.get(version)
        if entry is not None:
            return f"its last state: {_state_text(entry.state)}"
        seen = ", ".join(str(v) for v in sorted(states)) or "none"
        return f"no state of it was published (versions seen: {seen})"
    if not states:
        return (
            "no version of it was ever published (is it configured, and does the monitor "
            "watch the manager's event bus?)"
        )
    listed = ", ".join(f"version {v}: {_state_text(states[v].state)}" for v in sorted(states))
    return f"last states: {listed}"


def _state_text(state: ServableState) -> str:
    if state.health is None:
        return str(state.manager_state)
    return f"{state.manager_state} with error {state.health!r}"
