"""ReloadWaits: a reload's wait for its new models, woken by the state monitor's changes."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import final

from servinglib.core.event_bus import EventBus
from servinglib.core.servable_state import ManagerState
from servinglib.core.servable_state_monitor import ServableStateAndTime, ServableStateMonitor
from servinglib.errors import DeadlineExceededError, ServingError, StatusCode


@final
class ReloadWaits:
    """Waits until each new model of a reload has an available version, or fails.

    A wait looks at a model again each time the monitor records something
    of it (a state, a storage condition: see ``ServableStateMonitor.changes``)
    and at every model after :meth:`wake_all`; it takes no lock of the
    reload and polls nothing.
    Thread-safe.
    """

    def __init__(self, monitor: ServableStateMonitor) -> None:
        self._monitor = monitor
        self._wake_all = EventBus[None]()

    def wait(
        self,
        before: Mapping[str, Mapping[int, ServableStateAndTime]],
        *,
        timeout_s: float | None,
        abandoned: Callable[[str], ServingError | None],
    ) -> dict[str, ServingError]:
        """Waits for the models of ``before``; returns those that failed, with why.

        ``before`` maps each awaited model to its states before the reload
        (those do not count).  A model settles when a version is available
        (it succeeded), when its storage reports an error and the reload
        published nothing of it, or when every version this reload published
        ended with an error; else when ``abandoned(name)`` says why waiting
        is pointless (the core closed, the model removed, ...).  Past
        ``timeout_s`` the models still pending fail with
        DeadlineExceededError.
        """
        pending = set(before)
        failures: dict[str, ServingError] = {}
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        woken = _Woken(pending)
        with self._monitor.changes.subscribe(woken.touch), self._wake_all.subscribe(woken.all):
            while pending:
                for name in sorted(woken.take() & pending):
                    outcome = _outcome(self._monitor, name, before[name])
                    if outcome is None:
                        outcome = abandoned(name)
                    if outcome is not None:
                        pending.discard(name)
                        if isinstance(outcome, ServingError):
                            failures[name] = outcome
                if not pending:
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    for name in pending:
                        failures[name] = DeadlineExceededError(
                            f"Model {name} did not become available within {timeout_s} s"
                        )
                    break
                woken.wait(None if deadline is None else deadline - time.monotonic())
        return failures

    def wake_all(self) -> None:
        """Has every wait look at each of its models again (say, the core is draining)."""
        self._wake_all.publish(None)


def failure_error(failures: Mapping[str, ServingError]) -> ServingError:
    """The error a reload raises for the models that failed its wait: naming each, of their
    errors' code when they share one, else UNKNOWN.  Requires: ``failures`` not empty."""
    listed = "; ".join(f"{name}: {error.message}" for name, error in sorted(failures.items()))
    message = f"{len(failures)} model(s) did not become available: {listed}"
    codes = {error.code for error in failures.values()}
    return ServingError.from_code(codes.pop() if len(codes) == 1 else StatusCode.UNKNOWN, message)


@final
class _Woken:
    """The names a wait is to look at again, and the event that wakes it.  Thread-safe."""

    def __init__(self, names: set[str]) -> None:
        self._lock = threading.Lock()
        self._names = set(names)  # guarded by: _lock; all of them at first
        self._every = frozenset(names)
        self._changed = threading.Event()

    def touch(self, name: str) -> None:
        with self._lock:
            self._names.add(name)
        self._changed.set()

    def all(self, _: None) -> None:
        with self._lock:
            self._names |= self._every
        self._changed.set()

    def take(self) -> set[str]:
        """The names touched since the last take (and clears the event before reading them)."""
        self._changed.clear()
        with self._lock:
            names, self._names = self._names, set()
        return names

    def wait(self, timeout_s: float | None) -> None:
        self._changed.wait(timeout_s)


def _outcome(
    monitor: ServableStateMonitor, name: str, before: Mapping[int, ServableStateAndTime]
) -> ServingError | bool | None:
    """True if ``name`` has an available version, its error if it failed, None if pending."""
    current = monitor.get_version_states(name)
    # Available whenever it was published: a model removed and added again before its
    # unload began keeps its version, and publishes nothing new.
    if monitor.versions_in(name, ManagerState.AVAILABLE):
        return True
    states = {v: e for v, e in current.items() if before.get(v) is not e}  # this reload's
    newest_first = [states[v].state for v in sorted(states, reverse=True)]
    storage_error = monitor.storage_condition(name).error
    if storage_error is not None and not newest_first:
        return storage_error
    if newest_first and all(s.manager_state is ManagerState.END for s in newest_first):
        # A clean END is an earlier unload finishing (a model removed and added again):
        # the version is still aspired and loads next, so only an error ends the wait.
        errors = [s.health for s in newest_first if s.health is not None]
        if errors:
            return errors[0]
    return None
