"""ServableStateMonitor: remembers the states (and storage conditions) published, and waits."""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import final

import attrs

from servinglib.core.clock import Clock, SystemClock
from servinglib.core.event_bus import EventBus
from servinglib.core.servable_id import ServableId
from servinglib.core.servable_request import AutoVersionPolicy, ServableRequest
from servinglib.core.servable_state import ManagerState, ServableState
from servinglib.core.storage_condition import StorageCondition

NotifyFn = Callable[[bool, Mapping[ServableId, ManagerState]], None]


@final
@attrs.frozen
class ServableStateAndTime:
    """A servable's last published state and when (the monitor clock's seconds) it was seen.

    Immutable, so thread-safe.
    """

    state: ServableState
    time_s: float


@final
class ServableStateMonitor:
    """Tracks every servable's latest state from an event bus; answers queries and waits.

    ``max_count_log_events`` bounds the event log (0 keeps none), as TF Serving.
    ``storage``: a bus of the :class:`StorageCondition` a source publishes;
    the latest per name is kept (:meth:`storage_condition`), so a servable's
    health is asked here, whichever source watches it.  Every state or
    condition recorded is then announced on :attr:`changes`.
    Thread-safe.
    """

    def __init__(
        self,
        bus: EventBus[ServableState],
        *,
        storage: EventBus[StorageCondition] | None = None,
        max_count_log_events: int = 0,
        clock: Clock | None = None,
    ) -> None:
        self._clock = clock if clock is not None else SystemClock()
        self._lock = threading.Condition()
        self._states: dict[str, dict[int, ServableStateAndTime]] = {}  # guarded by: _lock
        self._log: collections.deque[ServableStateAndTime] = collections.deque(
            maxlen=max_count_log_events
        )  # guarded by: _lock
        self._waiters: list[_Notification] = []  # guarded by: _lock
        self._storage: dict[str, StorageCondition] = {}  # guarded by: _lock; none clear
        self._changes = EventBus[str]()
        self._subscriptions = [bus.subscribe(self._handle_event)]
        if storage is not None:
            self._subscriptions.append(storage.subscribe(self._handle_storage))

    def close(self) -> None:
        """Stops listening to the buses; queries keep answering from what was seen."""
        for subscription in self._subscriptions:
            subscription.cancel()

    @property
    def changes(self) -> EventBus[str]:
        """Publishes a servable's name each time a state or storage condition of it was recorded.

        Delivered on the publishing thread once the record is made, so a
        subscriber's queries see it: subscribe to wait for something about a
        servable (a reload's wait does) instead of polling.  Subscribers must
        be quick and must not publish on the buses this monitor follows.
        """
        return self._changes

    def storage_condition(self, name: str) -> StorageCondition:
        """What the source last found in ``name``'s storage; a clear condition if nothing."""
        with self._lock:
            found = self._storage.get(name)
        return found if found is not None else StorageCondition(name)

    def get_state(self, servable_id: ServableId) -> ServableState | None:
        """The last state of ``servable_id``, or None if never seen."""
        found = self.get_state_and_time(servable_id)
        return found.state if found is not None else None

    def get_state_and_time(self, servable_id: ServableId) -> ServableStateAndTime | None:
        """The last state of ``servable_id`` with its time, or None if never seen."""
        with self._lock:
            return self._states.get(servable_id.name, {}).get(servable_id.version)

    def get_version_states(self, name: str) -> dict[int, ServableStateAndTime]:
        """Every version of ``name`` seen, by version."""
        with self._lock:
            return dict(self._states.get(name, {}))

    def versions_in(self, name: str, *states: ManagerState) -> set[int]:
        """The versions of ``name`` whose last state is one of ``states``."""
        with self._lock:
            versions = self._states.get(name, {})
            return {v for v, s in versions.items() if s.state.manager_state in states}

    def get_all_servable_states(self) -> dict[str, dict[int, ServableStateAndTime]]:
        """Every servable seen, by name and version."""
        with self._lock:
            return {name: dict(versions) for name, versions in self._states.items()}

    def get_live_servable_states(self) -> dict[str, dict[int, ServableStateAndTime]]:
        """Like :meth:`get_all_servable_states`, without versions in END."""
        with self._lock:
            live = {
                name: {
                    v: s
                    for v, s in versions.items()
                    if s.state.manager_state is not ManagerState.END
                }
                for name, versions in self._states.items()
            }
        return {name: versions for name, versions in live.items() if versions}

    def get_available_servable_states(self) -> set[ServableId]:
        """The ids of every version now AVAILABLE."""
        with self._lock:
            return {
                s.state.id
                for versions in self._states.values()
                for s in versions.values()
                if s.state.manager_state is ManagerState.AVAILABLE
            }

    def forget_unloaded_servable_states(self) -> None:
        """Drops versions in END that ended without error (keeps failures visible)."""
        with self._lock:
            for name in list(self._states):
                versions = self._states[name]
                for version in [v for v, s in versions.items() if _unloaded(s.state)]:
                    del versions[version]
                if not versions:
                    del self._states[name]

    def get_bounded_log(self) -> list[ServableStateAndTime]:
        """The last ``max_count_log_events`` events, oldest first."""
        with self._lock:
            return list(self._log)

    def notify_when_servables_reach_state(
        self, requests: Iterable[ServableRequest], goal_state: ManagerState, notify: NotifyFn
    ) -> None:
        """Calls ``notify(reached, states)`` once every request is settled.

        A request for a specific version settles when that version reaches
        ``goal_state`` or END; one for latest/earliest when any version of the
        name reaches ``goal_state`` (the highest/lowest such is reported), or
        when every known version is in END.  ``reached`` is True iff every
        request settled in ``goal_state``.  ``notify`` runs on the thread that
        settled the last request (maybe this one, before returning).
        """
        self._register(_Notification(tuple(requests), goal_state, notify))

    def wait_until_servables_reach_state(
        self,
        requests: Iterable[ServableRequest],
        goal_state: ManagerState,
        timeout_s: float | None = None,
    ) -> tuple[bool, dict[ServableId, ManagerState]]:
        """Blocks until every request settles (see :meth:`notify_when_servables_reach_state`).

        Returns ``(reached, states)``; on timeout ``reached`` is False and
        ``states`` holds what was settled by then.
        """
        done = threading.Event()
        result: list[tuple[bool, Mapping[ServableId, ManagerState]]] = []

        def on_settled(reached: bool, states: Mapping[ServableId, ManagerState]) -> None:
            result.append((reached, states))
            done.set()

        waiter = _Notification(tuple(requests), goal_state, on_settled)
        self._register(waiter)
        if not done.wait(timeout_s):
            with self._lock:
                pending = waiter in self._waiters
                if pending:
                    self._waiters.remove(waiter)
                partial = dict(waiter.settled)
            if pending:
                return False, partial
            done.wait()  # settled just as the time ran out: its notify is on its way
        reached, states = result[0]
        return reached, dict(states)

    def _register(self, waiter: _Notification) -> None:
        """Fires ``waiter`` now if it is settled, else keeps it for the events to come."""
        with self._lock:
            settled = waiter.check_locked(self._states)
            if not settled:
                self._waiters.append(waiter)
        if settled:
            waiter.fire()

    def _handle_event(self, state: ServableState) -> None:
        entry = ServableStateAndTime(state, self._clock.now())
        with self._lock:
            self._states.setdefault(state.id.name, {})[state.id.version] = entry
            self._log.append(entry)
            fired = [w for w in self._waiters if w.check_locked(self._states)]
            self._waiters = [w for w in self._waiters if w not in fired]
        for waiter in fired:
            waiter.fire()
        self._changes.publish(state.id.name)

    def _handle_storage(self, condition: StorageCondition) -> None:
        with self._lock:
            if condition.clear:
                self._storage.pop(condition.servable_name, None)
            else:
                self._storage[condition.servable_name] = condition
        self._changes.publish(condition.servable_name)


def _unloaded(state: ServableState) -> bool:
    return state.manager_state is ManagerState.END and state.ok


@attrs.define(eq=False)
class _Notification:
    requests: tuple[ServableRequest, ...]
    goal: ManagerState
    notify: NotifyFn
    settled: dict[ServableId, ManagerState] = attrs.field(factory=dict)

    def check_locked(self, states: Mapping[str, Mapping[int, ServableStateAndTime]]) -> bool:
        """Settles what it can; True once every request is settled."""
        self.settled = {}
        all_settled = True
        for request in self.requests:
            found = _settle(request, self.goal, states.get(request.name, {}))
            if found is None:
                all_settled = False  # keep going: a timed-out wait reports every settled request
                continue
            self.settled[found[0]] = found[1]
        return all_settled

    def fire(self) -> None:
        reached = all(state is self.goal for state in self.settled.values())
        self.notify(reached, dict(self.settled))


def _settle(
    request: ServableRequest, goal: ManagerState, versions: Mapping[int, ServableStateAndTime]
) -> tuple[ServableId, ManagerState] | None:
    if request.version is not None:
        entry = versions.get(request.version)
        if entry is None:
            return None
        state = entry.state.manager_state
        return (entry.state.id, state) if state in (goal, ManagerState.END) else None
    in_goal = sorted(v for v, s in versions.items() if s.state.manager_state is goal)
    if in_goal:
        pick = (
            in_goal[-1] if request.auto_version_policy is AutoVersionPolicy.LATEST else in_goal[0]
        )
        return versions[pick].state.id, goal
    if versions and all(s.state.manager_state is ManagerState.END for s in versions.values()):
        last = versions[max(versions)].state.id
        return last, ManagerState.END
    return None
