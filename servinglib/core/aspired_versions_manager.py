"""AspiredVersionsManager: makes the loaded versions follow the aspired versions."""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Sequence
from typing import Any, final

import attrs

from servinglib.core.argument_types import check_loader_data
from servinglib.core.aspired_version_policy import (
    Action,
    AspiredServableStateSnapshot,
    AspiredVersionPolicy,
    ServableAction,
)
from servinglib.core.basic_manager import BasicManager, ManagerOptions, ServableStateSnapshot
from servinglib.core.clock import Clock
from servinglib.core.event_bus import EventBus
from servinglib.core.loader import Loader
from servinglib.core.loader_harness import HarnessState
from servinglib.core.manager import Manager
from servinglib.core.resource_tracker import ResourceTracker
from servinglib.core.servable_data import AspiredVersionsCallback, ServableData
from servinglib.core.servable_handle import ServableHandle
from servinglib.core.servable_id import ServableId
from servinglib.core.servable_request import ServableRequest
from servinglib.core.servable_state import ServableState
from servinglib.core.wake_loop import WakeLoop
from servinglib.errors import InvalidArgumentError

_log = logging.getLogger(__name__)

_FLUSHABLE = frozenset({HarnessState.NEW, HarnessState.DISABLED, HarnessState.ERROR})
# On the way out: a request aspiring these again waits until they are gone.
_LEAVING = frozenset(
    {
        HarnessState.UNLOAD_REQUESTED,
        HarnessState.QUIESCING,
        HarnessState.QUIESCED,
        HarnessState.UNLOADING,
        HarnessState.DISABLED,
    }
)
# On the way in: a version re-offered with another revision waits until these end.
_LOADING = frozenset(
    {HarnessState.LOAD_REQUESTED, HarnessState.LOAD_APPROVED, HarnessState.LOADING}
)


@attrs.define
class _Aspired:
    """The manager's additional state of each version: is it still aspired, and its revision."""

    is_aspired: bool = True  # guarded by: the manager's _lock
    revision: int = 0


@final
class AspiredVersionsManager(Manager):
    """A Target for aspired-versions streams that loads and unloads to match them.

    Each :meth:`set_aspired_versions` call for a servable name carries the
    complete desired set of versions: versions left out are unloaded, an
    empty set unloads them all, a version still aspired is never unloaded.
    Each step (:meth:`run_once`, by the manage-state thread or by hand)
    applies the latest request per name and takes at most one policy action,
    unloads before loads; the thread steps on each change and at least every
    ``manage_state_interval_s`` (``None``: no thread).  A version in ERROR
    aspired again with another revision (or any, with
    ``enable_reload_servables_with_error``) gets its new loader.
    Thread-safe.
    """

    def __init__(
        self,
        policy: AspiredVersionPolicy,
        options: ManagerOptions | None = None,
        *,
        manage_state_interval_s: float | None = 0.1,
        enable_reload_servables_with_error: bool = False,
        resource_tracker: ResourceTracker | None = None,
        event_bus: EventBus[ServableState] | None = None,
        clock: Clock | None = None,
    ) -> None:
        self._policy = policy
        self._reload_errors = enable_reload_servables_with_error
        self._basic = BasicManager(
            options, resource_tracker=resource_tracker, event_bus=event_bus, clock=clock
        )
        self._lock = threading.Lock()
        self._pending: dict[str, tuple[ServableData[Loader], ...]] = {}  # guarded by: _lock
        # Names whose versions changed since a step last found nothing to do
        # for them: a step looks only at these, so an idle step costs nothing.
        self._dirty: set[str] = set()  # guarded by: _lock
        self._step_lock = threading.Lock()  # serializes steps
        self._stop = threading.Event()
        self._loop: WakeLoop | None = None
        if manage_state_interval_s is not None:
            interval_s = manage_state_interval_s

            def step() -> float:  # at once again while steps change something
                return 0.0 if self.run_once() else interval_s

            self._loop = WakeLoop(
                "servinglib-manage-state",
                step,
                what="manage-state step",
                first_wait_s=0.0,
                after_error_s=interval_s,
            )
            self._loop.start()

    @property
    def event_bus(self) -> EventBus[ServableState]:
        """The bus lifecycle events are published on."""
        return self._basic.event_bus

    @property
    def basic_manager(self) -> BasicManager:
        """The manager doing the loads and unloads (for inspection)."""
        return self._basic

    # -- Target -------------------------------------------------------------

    def set_aspired_versions(
        self, servable_name: str, versions: Sequence[ServableData[Loader]]
    ) -> None:
        """Makes ``versions`` the complete desired set of versions of ``servable_name``.

        Replaces any request for the name not applied yet.  Raises
        InvalidArgumentError if an item names another servable or a version
        twice, TypeError if an item is not a ServableData holding a Loader
        (or an error).  Thread safety: any thread; never blocks on loads.
        """
        seen: set[int] = set()
        for item in versions:
            check_loader_data(item, "set_aspired_versions()")
            if item.id.name != servable_name:
                raise InvalidArgumentError(
                    f"Aspired versions of {servable_name} include servable {item.id}"
                )
            if item.id.version in seen:
                raise InvalidArgumentError(f"Aspired versions repeat servable {item.id}")
            seen.add(item.id.version)
        with self._lock:
            self._pending[servable_name] = tuple(versions)
        self._wake()

    def aspired_versions_callback(self) -> AspiredVersionsCallback[Loader]:
        """The callback a Source calls with aspired versions; a no-op once this manager closed.

        Thread safety: the callback may be called from any thread.
        """

        def callback(servable_name: str, versions: Sequence[ServableData[Loader]]) -> None:
            if not self._stop.is_set():
                self.set_aspired_versions(servable_name, versions)

        return callback

    # -- request path -------------------------------------------------------

    def servable_handle(self, request: ServableRequest) -> ServableHandle[Any]:
        return self._basic.servable_handle(request)

    def resolve(self, request: ServableRequest) -> ServableId:
        return self._basic.resolve(request)

    def list_available_servable_ids(self) -> list[ServableId]:
        return self._basic.list_available_servable_ids()

    # -- stepping -----------------------------------------------------------

    def run_once(self) -> bool:
        """One step: forget finished versions, apply pending requests, act for each name.

        A step looks only at names whose versions changed since a step last found
        nothing to do, and starts the policy's next action for each (unloads
        first).  Returns True if the step changed anything (so another step may
        have more to do).  With 0 load (unload) threads the actions' loads
        (unloads) run before this returns.  After close() a step does nothing.
        """
        with self._step_lock:
            if self._stop.is_set():
                return False  # closed: nothing more is loaded or unloaded
            with self._lock:
                names, self._dirty = self._dirty, set()
                waiting = set(self._pending)
            changed = self._flush_servables(names | waiting)
            applied = self._apply_pending_requests()
            # Versions a request just dropped while new or in error go at once.
            changed = self._flush_servables(applied) or changed
            actions = self._next_actions(names | applied)
            if not actions:
                return changed or bool(applied)
            for action in actions:
                if action.action is Action.LOAD:
                    future = self._basic.load_servable(action.id)
                else:
                    future = self._basic.unload_servable(action.id)
                future.add_done_callback(functools.partial(self._on_action_done, action.id.name))
            return True

    def aspired_snapshots(self, name: str) -> list[AspiredServableStateSnapshot]:
        """What the policy sees for ``name``: each managed version's state and aspiredness."""
        with self._lock:
            return [_policy_view(s) for s in self._basic.managed_servable_snapshots(name)]

    def close(self) -> None:
        """Stops the manage-state thread and unloads everything; idempotent."""
        self._stop.set()
        if self._loop is not None:
            self._loop.stop()
        self._basic.close()

    def __enter__(self) -> AspiredVersionsManager:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- internals ----------------------------------------------------------

    def _wake(self) -> None:
        if self._loop is not None:
            self._loop.wake()

    def _on_action_done(self, name: str, _future: object) -> None:
        self._mark_dirty(name)

    def _mark_dirty(self, name: str) -> None:
        """Has the next step look at ``name`` again (its versions changed state)."""
        with self._lock:
            self._dirty.add(name)
        self._wake()

    def _flush_servables(self, names: set[str]) -> bool:
        """Stops managing versions of ``names`` no longer aspired that are new or finished."""
        flushed = False
        for name in names:
            for snapshot in self._basic.managed_servable_snapshots(name):
                if snapshot.state in _FLUSHABLE and not _is_aspired(snapshot):
                    self._basic.stop_managing_servable(snapshot.id)
                    flushed = True
        return flushed

    def _apply_pending_requests(self) -> set[str]:
        """Applies what can be applied; returns the names whose requests were applied."""
        with self._lock:
            pending, self._pending = self._pending, {}
        deferred: dict[str, tuple[ServableData[Loader], ...]] = {}
        for name, versions in pending.items():
            if not self._apply_request(name, versions):
                deferred[name] = versions
        if deferred:
            with self._lock:
                for name, versions in deferred.items():
                    self._pending.setdefault(name, versions)
        return pending.keys() - deferred.keys()

    def _apply_request(self, name: str, versions: tuple[ServableData[Loader], ...]) -> bool:
        """Applies one request; False (defer it) while a re-aspired version still unloads.

        A re-aspired version that is still loading or serving simply becomes
        aspired again (e.g. a rollback to the version still serving); one
        still loading with another revision defers the request too, its
        retries cancelled, so it is replaced if its attempt fails.
        """
        managed = {s.id.version: s for s in self._basic.managed_servable_snapshots(name)}
        wanted = {item.id.version: item for item in versions}
        if any(
            v in managed and not _is_aspired(managed[v]) and managed[v].state in _LEAVING
            for v in wanted
        ):
            return False
        revised = [
            managed[v]
            for v, item in wanted.items()
            if v in managed
            and managed[v].state in _LOADING
            and _revision(managed[v]) != item.revision
        ]
        for snapshot in revised:
            self._basic.cancel_load_servable_retry(snapshot.id)
        if revised:
            return False
        for version, snapshot in managed.items():
            aspired = version in wanted
            with self._lock:
                snapshot.additional_state.is_aspired = aspired
            if not aspired:
                self._basic.cancel_load_servable_retry(snapshot.id)
        for version, item in wanted.items():
            current = managed.get(version)
            if current is not None:
                if current.state is not HarnessState.ERROR or not (
                    _revision(current) != item.revision or (self._reload_errors and item.ok)
                ):
                    continue
                self._basic.stop_managing_servable(current.id)
            self._basic.manage_servable(item, _Aspired(revision=item.revision))
        return True

    def _next_actions(self, names: set[str]) -> list[ServableAction]:
        """The action the policy wants for each of ``names`` that has one, unloads first.

        One action per name and step: a policy sees a name's versions again
        only once its action has moved them on.  Unloads come first (they
        free resources), then by name and version, for determinism.
        """
        actions = []
        for name in names:
            action = self._policy.next_action(self.aspired_snapshots(name))
            if action is not None:
                actions.append(action)
        actions.sort(key=lambda a: (a.action is not Action.UNLOAD, a.id.name, a.id.version))
        return actions


def _is_aspired(snapshot: ServableStateSnapshot) -> bool:
    state = snapshot.additional_state
    return isinstance(state, _Aspired) and state.is_aspired


def _revision(snapshot: ServableStateSnapshot) -> int:
    state = snapshot.additional_state
    return state.revision if isinstance(state, _Aspired) else 0


def _policy_view(snapshot: ServableStateSnapshot) -> AspiredServableStateSnapshot:
    return AspiredServableStateSnapshot(snapshot.id, snapshot.state, _is_aspired(snapshot))
