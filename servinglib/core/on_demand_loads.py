"""OnDemandLoads: models registered, loaded on their first request, evicted LRU under a budget."""

from __future__ import annotations

import concurrent.futures
import enum
import itertools
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import final

import attrs

from servinglib.core.event_bus import EventBus
from servinglib.core.loader import Loader
from servinglib.core.lru_eviction import ResidentModel, choose_evictions
from servinglib.core.resources import RAM_IN_BYTES, ResourceAllocation
from servinglib.core.servable_data import AspiredVersionsCallback, ServableData
from servinglib.core.servable_state import ManagerState, ServableState
from servinglib.errors import NotFoundError, ResourceExhaustedError, ServingError

_log = logging.getLogger(__name__)


@final
class Residency(enum.Enum):
    """Where an on-demand model is: registered only, loading for a request, or loaded."""

    REGISTERED = "registered"
    LOADING = "loading"
    LOADED = "loaded"


_TRANSITIONS: Mapping[Residency, frozenset[Residency]] = {
    Residency.REGISTERED: frozenset({Residency.LOADING, Residency.LOADED}),
    Residency.LOADING: frozenset({Residency.LOADED, Residency.REGISTERED}),
    Residency.LOADED: frozenset({Residency.REGISTERED}),
}


@final
@attrs.frozen
class OnDemandEvent:
    """What happened to a model loaded on demand: ``"loaded"`` (``seconds``: from the first
    request to an available version), ``"failed"`` (``error``) or ``"evicted"``
    (``ram_bytes`` freed).  Immutable, so thread-safe."""

    kind: str
    name: str
    seconds: float = 0.0
    ram_bytes: int = 0
    error: ServingError | None = None


@final
@attrs.frozen
class OnDemandStatistics:
    """A snapshot: the budget (None: none), what the resident models' estimates add up to,
    how many are resident (pinned ones included) and how many are registered only.
    Immutable, so thread-safe."""

    budget_bytes: int | None
    resident_bytes: int
    resident_models: int
    registered_models: int


@attrs.define
class _Model:
    """One configured model as the gate keeps it.  Guarded by: the gate's ``_lock``."""

    on_demand: bool
    versions: tuple[ServableData[Loader], ...] = ()
    residency: Residency = Residency.REGISTERED
    ram_bytes: int = 0
    last_used: int = 0
    waiters: list[concurrent.futures.Future[None]] = attrs.field(factory=list)
    loading: set[int] = attrs.field(factory=set)  # versions whose load has not ended yet
    started_s: float = 0.0
    failure: ServingError | None = None
    attempts: int = 0  # added to revisions, so a version that failed loads afresh
    held: set[int] = attrs.field(factory=set)  # versions the manager made available, not ended
    deferred: bool = False  # loading waits for ``held`` to end (an unload still to happen)


@final
class OnDemandLoads:
    """A Target of Loaders in front of a manager that holds back models loaded on demand.

    Each configured model (:meth:`configure`) is either *pinned* (its aspired
    versions pass at once, as without this gate) or *on demand*: its versions
    are kept, *registered*, and passed on only when :meth:`demand` names it
    (a request for it).  With ``budget_bytes``, a model about to load on
    demand needs room for its loaders' estimates: the least recently used
    loaded on-demand models that no request is in flight for (the
    ``count_requests_with`` counters say) are unloaded to make it (their
    aspired versions emptied, so the manager unloads them, and the load
    waits until they are gone); one that cannot fit even so fails with
    RESOURCE_EXHAUSTED.  Pinned models count in the budget and are never
    unloaded.  Names never configured pass through.  :attr:`events` tells of
    loads, failures and evictions.
    Thread-safe; :meth:`demand` takes one short lock.
    """

    def __init__(
        self,
        target: AspiredVersionsCallback[Loader],
        states: EventBus[ServableState],
        *,
        budget_bytes: int | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._target = target
        self._budget = budget_bytes
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._models: dict[str, _Model] = {}  # guarded by: _lock
        # The models not registered only: what eviction and statistics look at (not all of them).
        self._resident: dict[str, _Model] = {}  # guarded by: _lock; in the order they came
        self._counters: tuple[Callable[[str], int], ...] = ()  # replaced whole
        self._ticks = itertools.count(1)
        self.events: EventBus[OnDemandEvent] = EventBus()
        states.subscribe(self._on_state)

    @property
    def budget_bytes(self) -> int | None:
        """The budget of the resident models' estimates (None: none)."""
        return self._budget

    def count_requests_with(self, counter: Callable[[str], int]) -> None:
        """Adds ``counter(name)``, a count of a model's requests in flight (a data plane's):
        a model with any is never unloaded to make room.

        Important: a request must be counted before it calls :meth:`demand`
        and until it has released its handle.
        """
        self._counters = (*self._counters, counter)

    def configure(self, on_demand: Mapping[str, bool]) -> None:
        """Makes ``on_demand`` (each configured model → whether it loads on demand) the models
        kept; models left out are forgotten (their waiting requests fail with NOT_FOUND)."""
        with self._lock:
            for name in self._models.keys() - on_demand.keys():
                removed = self._models.pop(name)
                self._resident.pop(name, None)
                _fail(removed.waiters, NotFoundError(f"Model {name} was removed from the config"))
            for name, wanted in on_demand.items():
                model = self._models.get(name)
                if model is None:
                    self._models[name] = _Model(wanted)
                elif model.on_demand != wanted:
                    model.on_demand = wanted
                    if not wanted and model.residency is Residency.REGISTERED:  # pinned now
                        self._move_locked(name, model, Residency.LOADED)
                        model.ram_bytes = _estimate(model.versions)
                        self._forward_locked(name, model)
                    elif model.residency is Residency.LOADED:
                        model.last_used = next(self._ticks)

    def aspired_versions_callback(self) -> AspiredVersionsCallback[Loader]:
        """The callback the Source (or adapter) above calls with aspired versions."""
        return self.set_aspired_versions

    def set_aspired_versions(self, name: str, versions: Sequence[ServableData[Loader]]) -> None:
        """Keeps ``versions`` of ``name``; passes them on unless it is registered only."""
        with self._lock:
            model = self._models.get(name)
            if model is None:
                self._target(name, versions)
                return
            model.versions = tuple(versions)
            if not model.on_demand:
                self._move_locked(name, model, Residency.LOADED)
            elif not versions and model.residency is not Residency.REGISTERED:
                self._move_locked(name, model, Residency.REGISTERED)
                self._target(name, ())
                _fail(model.waiters, NotFoundError(f"Model {name} has no versions any more"))
                model.waiters = []
                return
            if model.residency is not Residency.REGISTERED:  # registered: estimated when demanded
                model.ram_bytes = _estimate(model.versions)
                # Deferred: passed on once the withdrawal ended (see demand), not before.
                if not model.deferred:
                    self._forward_locked(name, model)

    def demand(self, name: str) -> concurrent.futures.Future[None] | None:
        """A request names ``name``: None when it need not wait (loaded, pinned, not kept here,
        or without versions: the lookup answers); else a future of its own that completes when
        a version is available, or with the load's error (RESOURCE_EXHAUSTED at once when it
        cannot fit).  A model not loaded starts loading; requests meanwhile share that load.
        Cancelling the future leaves the load running.
        """
        events: list[OnDemandEvent] = []
        with self._lock:
            model = self._models.get(name)
            if model is None or not model.on_demand or not model.versions:
                return None
            if model.residency is Residency.LOADED:
                model.last_used = next(self._ticks)
                return None
            waiter: concurrent.futures.Future[None] = concurrent.futures.Future()
            if model.residency is Residency.REGISTERED:
                model.ram_bytes = _estimate(model.versions)
                try:
                    events = self._make_room_locked(name, model)
                except ResourceExhaustedError as error:
                    waiter.set_exception(error)
                    return waiter
                self._move_locked(name, model, Residency.LOADING)
                model.loading = {item.id.version for item in model.versions}
                model.started_s = self._monotonic()
                # Its versions withdrawn to make room and not unloaded yet: passing them again
                # now could replace the withdrawal before the manager saw it (no load, no event).
                model.deferred = bool(model.held)
                if not model.deferred:
                    self._forward_locked(name, model)
            model.waiters.append(waiter)
        self._publish(events)
        return waiter

    def registered(self, name: str) -> tuple[tuple[int, ...], ServingError | None] | None:
        """For a model kept registered only: its versions, and why its last load failed (None:
        it has not); None for any other model."""
        with self._lock:
            model = self._models.get(name)
            if model is None or model.residency is not Residency.REGISTERED:
                return None
            return tuple(item.id.version for item in model.versions), model.failure

    def residency(self, name: str) -> Residency | None:
        """Where ``name`` is (pinned models are LOADED); None for a name not kept here."""
        model = self._models.get(name)
        return None if model is None else model.residency

    def registered_with_versions(self, name: str) -> bool:
        """Whether ``name`` loads on demand and its versions were found (a request can load it)."""
        model = self._models.get(name)  # one dict read, and two of attributes: no lock needed
        return model is not None and model.on_demand and bool(model.versions)

    def statistics(self) -> OnDemandStatistics:
        """The budget and what is resident now."""
        with self._lock:
            resident = list(self._resident.values())
            return OnDemandStatistics(
                self._budget,
                sum(m.ram_bytes for m in resident),
                len(resident),
                len(self._models) - len(resident),
            )

    # -- internals ----------------------------------------------------------

    def _make_room_locked(self, name: str, model: _Model) -> list[OnDemandEvent]:
        """Unloads least recently used idle models until ``model`` fits the budget; the
        evictions.  Raises ResourceExhaustedError (evicting none) when it cannot fit."""
        if self._budget is None:
            return []
        resident = [
            ResidentModel(
                other,
                m.ram_bytes,
                m.last_used,
                m.on_demand and m.residency is Residency.LOADED and not self._busy(other),
            )
            for other, m in self._resident.items()
        ]
        victims = choose_evictions(resident, model.ram_bytes, self._budget)
        if victims is None:
            held = sum(m.ram_bytes for m in resident if not m.evictable)
            raise ResourceExhaustedError(
                f"Model {name} cannot be loaded: its estimate of {model.ram_bytes} bytes does not "
                f"fit the model memory budget of {self._budget} bytes ({held} bytes held by "
                "pinned, loading or busy models)"
            )
        events = []
        for victim in victims:
            evicted = self._models[victim]
            self._move_locked(victim, evicted, Residency.REGISTERED)
            self._target(victim, ())
            events.append(OnDemandEvent("evicted", victim, ram_bytes=evicted.ram_bytes))
            _log.info("Model %s unloaded to make room for model %s", victim, name)
        return events

    def _busy(self, name: str) -> bool:
        return any(counter(name) for counter in self._counters)

    def _forward_locked(self, name: str, model: _Model) -> None:
        if model.attempts:
            versions = [
                attrs.evolve(v, revision=v.revision + model.attempts) for v in model.versions
            ]
            self._target(name, versions)
        else:
            self._target(name, model.versions)

    def _move_locked(self, name: str, model: _Model, to: Residency) -> None:
        """The one place residencies change; rejects a change the table does not allow."""
        if to is model.residency:
            return
        if to not in _TRANSITIONS[model.residency]:
            raise AssertionError(f"Model {name}: {model.residency.value} → {to.value}")
        model.residency = to
        if to is Residency.REGISTERED:
            self._resident.pop(name, None)
        else:
            self._resident[name] = model

    def _on_state(self, state: ServableState) -> None:
        """Completes the waits of a model loading on demand as its versions end their loads."""
        name = state.id.name
        event: OnDemandEvent | None = None
        with self._lock:
            model = self._models.get(name)
            if model is None:
                return
            if state.manager_state is ManagerState.AVAILABLE:
                model.held.add(state.id.version)
            elif state.manager_state is ManagerState.END:
                model.held.discard(state.id.version)
            if model.residency is not Residency.LOADING:
                return
            if model.deferred:
                if not model.held:  # the withdrawn versions are gone: load them afresh
                    model.deferred = False
                    self._forward_locked(name, model)
                return
            if state.manager_state is ManagerState.AVAILABLE:
                self._move_locked(name, model, Residency.LOADED)
                model.last_used = next(self._ticks)
                model.failure = None
                waiters, model.waiters = model.waiters, []
                seconds = self._monotonic() - model.started_s
                _succeed(waiters)
                event = OnDemandEvent("loaded", name, seconds=seconds)
            elif state.manager_state is ManagerState.END and state.health is not None:
                model.loading.discard(state.id.version)
                if model.loading:
                    return
                self._move_locked(name, model, Residency.REGISTERED)
                model.failure = state.health
                model.attempts += 1
                self._target(name, ())  # forget the failed versions: the next request retries
                waiters, model.waiters = model.waiters, []
                _fail(waiters, state.health)
                event = OnDemandEvent("failed", name, error=state.health)
        if event is not None:
            self._publish([event])

    def _publish(self, events: list[OnDemandEvent]) -> None:
        for event in events:
            self.events.publish(event)


def _estimate(versions: Sequence[ServableData[Loader]]) -> int:
    """The RAM bytes of ``versions``' loaders' estimates (errors hold none)."""
    total = ResourceAllocation.empty()
    for item in versions:
        if item.ok:
            total += item.data.estimate_resources()
    return sum(quantity for resource, quantity in total if resource.kind == RAM_IN_BYTES)


def _succeed(waiters: list[concurrent.futures.Future[None]]) -> None:
    for waiter in waiters:
        if waiter.set_running_or_notify_cancel():
            waiter.set_result(None)


def _fail(waiters: list[concurrent.futures.Future[None]], error: ServingError) -> None:
    for waiter in waiters:
        if waiter.set_running_or_notify_cancel():
            waiter.set_exception(error)
