"""BasicManager: loads, serves and unloads servable versions on request."""

from __future__ import annotations

import concurrent.futures
import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, final

import attrs

from servinglib.core.argument_types import (
    check_loader_data,
    check_servable_id,
    not_a_servable_request,
)
from servinglib.core.clock import Clock, SystemClock, Timer
from servinglib.core.event_bus import EventBus
from servinglib.core.loader import Loader
from servinglib.core.loader_harness import (
    HarnessState,
    LoaderHarness,
    LoadOutcome,
    LoadRetryOptions,
)
from servinglib.core.manager import Manager
from servinglib.core.resource_tracker import ResourceTracker
from servinglib.core.servable_data import ServableData
from servinglib.core.servable_handle import ServableHandle, ServingEntry
from servinglib.core.servable_id import ServableId
from servinglib.core.servable_request import ServableRequest
from servinglib.core.servable_state import ManagerState, ServableState
from servinglib.core.serving_map import ServingMap
from servinglib.errors import (
    AlreadyExistsError,
    CancelledError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    ResourceExhaustedError,
    ServingError,
    UnavailableError,
)

_log = logging.getLogger(__name__)

# Harness states whose loader holds (or is about to hold) resources.
_HOLDS_RESOURCES = frozenset(
    {
        HarnessState.LOAD_APPROVED,
        HarnessState.LOADING,
        HarnessState.READY,
        HarnessState.UNLOAD_REQUESTED,
        HarnessState.QUIESCING,
        HarnessState.QUIESCED,
        HarnessState.UNLOADING,
    }
)
_STOPPABLE = frozenset({HarnessState.NEW, HarnessState.ERROR, HarnessState.DISABLED})
# An unload waiting for handles still held says so after this long, then at this slow interval.
_HELD_FIRST_REPORT_S = 5.0
_HELD_REPORT_EVERY_S = 60.0


@final
@attrs.frozen
class ManagerOptions:
    """How a manager runs loads and unloads.

    ``num_load_threads`` / ``num_unload_threads``: pool sizes; 0 runs each load
    (unload) synchronously on the thread that asked for it.  ``load_retry``:
    retries of failed loads.  Immutable, so thread-safe.
    """

    num_load_threads: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    num_unload_threads: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    load_retry: LoadRetryOptions = attrs.field(factory=LoadRetryOptions)


@final
@attrs.frozen
class ServableStateSnapshot:
    """A managed version's harness state, and its manager's additional state.

    Immutable, so thread-safe (``additional_state`` is the manager's own object).
    """

    id: ServableId
    state: HarnessState
    additional_state: Any = None


@final
class BasicManager(Manager):
    """Loads and unloads servable versions when told to, and serves the loaded ones.

    Each load has a serialized *decision phase* (resource reservation, under
    a lock) and an *execution phase* on the load pool; unloads run on the
    unload pool.  Requests read an immutable serving map published whole, so
    :meth:`servable_handle` takes no manager lock.  Lifecycle events go to
    the event bus in the order START, LOADING, AVAILABLE, UNLOADING, END.
    Thread-safe.
    """

    def __init__(
        self,
        options: ManagerOptions | None = None,
        *,
        resource_tracker: ResourceTracker | None = None,
        event_bus: EventBus[ServableState] | None = None,
        clock: Clock | None = None,
    ) -> None:
        self._options = options if options is not None else ManagerOptions()
        self._tracker = resource_tracker
        self._bus = event_bus if event_bus is not None else EventBus()
        self._clock = clock if clock is not None else SystemClock()
        self._lock = threading.Lock()
        self._harnesses: dict[str, dict[int, LoaderHarness]] = {}  # guarded by: _lock
        self._retry_timers: dict[
            ServableId, tuple[Timer, Callable[[], None]]
        ] = {}  # guarded by: _lock
        self._closed = False  # guarded by: _lock
        # Versions unloading while handles to them are held: entry, monotonic start of the wait.
        self._quiescing: dict[ServableId, tuple[ServingEntry, float]] = {}  # guarded by: _lock
        self._serving = ServingMap()
        # Loads executing (not waiting for resources) and unloads requested and
        # not finished: what may still free resources for a waiting load.
        self._decision = threading.Lock()
        self._executing_loads = 0  # guarded by: _decision
        self._pending_unloads = 0  # guarded by: _decision
        # Loads that did not fit while others were in flight; retried when one ends.
        self._parked: list[
            tuple[LoaderHarness, concurrent.futures.Future[None]]
        ] = []  # guarded by: _decision
        self._load_pool = _pool(self._options.num_load_threads, "servinglib-load")
        self._unload_pool = _pool(self._options.num_unload_threads, "servinglib-unload")

    @property
    def event_bus(self) -> EventBus[ServableState]:
        """The bus this manager publishes lifecycle events on."""
        return self._bus

    @property
    def options(self) -> ManagerOptions:
        """The options this manager was built with."""
        return self._options

    # -- request path -------------------------------------------------------

    def servable_handle(self, request: ServableRequest) -> ServableHandle[Any]:
        if not isinstance(request, ServableRequest):
            raise not_a_servable_request(request)
        handle = self._serving.acquire(request)
        if handle is None:
            raise self._lookup_error(request)
        return handle

    def resolve(self, request: ServableRequest) -> ServableId:
        if not isinstance(request, ServableRequest):
            raise not_a_servable_request(request)
        found = self._serving.find(request)
        if found is None:
            raise self._lookup_error(request)
        return found

    def list_available_servable_ids(self) -> list[ServableId]:
        return self._serving.ids()

    # -- control path -------------------------------------------------------

    def manage_servable(self, data: ServableData[Loader], additional_state: Any = None) -> None:  # noqa: ANN401 - the caller's own state
        """Starts managing a version (state NEW, event START), or records its error.

        A ``data`` holding an error is managed in state ERROR, with an END
        event carrying the error.  Raises AlreadyExistsError if the id is
        already managed, FailedPreconditionError once closed, TypeError if
        ``data`` is not a ServableData holding a Loader (or an error).
        """
        check_loader_data(data, "manage_servable()")
        loader = data.data if data.ok else None
        harness = LoaderHarness(data.id, loader, self._options.load_retry, additional_state)
        with self._lock:
            if self._closed:
                raise FailedPreconditionError("the manager is closed")
            versions = self._harnesses.setdefault(data.id.name, {})
            if data.id.version in versions:
                raise AlreadyExistsError(f"Servable {data.id} is already being managed")
            versions[data.id.version] = harness
        if data.error is not None:
            harness.error_out(data.error)
            self._publish(data.id, ManagerState.END, data.error)
        else:
            self._publish(data.id, ManagerState.START)

    def stop_managing_servable(self, servable_id: ServableId) -> None:
        """Forgets a version that is NEW, in ERROR or DISABLED (a NEW one is published END).

        Raises NotFoundError if it is not managed, FailedPreconditionError if
        it is loading, serving or unloading.
        """
        check_servable_id(servable_id, "stop_managing_servable()")
        with self._lock:
            harness = self._harness_locked(servable_id)
            if harness.state not in _STOPPABLE:
                raise FailedPreconditionError(
                    f"Servable {servable_id} is {harness.state}; only new, disabled or "
                    "errored servables can stop being managed"
                )
            versions = self._harnesses[servable_id.name]
            del versions[servable_id.version]
            if not versions:
                del self._harnesses[servable_id.name]
        if harness.state is HarnessState.NEW:
            self._publish(servable_id, ManagerState.END)  # every version START-ed ends

    def load_servable(self, servable_id: ServableId) -> concurrent.futures.Future[None]:
        """Starts loading a managed NEW version; the future completes when it serves or fails.

        The future's exception is a ServingError: NotFoundError (not managed),
        FailedPreconditionError (not NEW), ResourceExhaustedError, or the
        load's own error after retries.  With 0 load threads the load runs
        before this returns.
        """
        check_servable_id(servable_id, "load_servable()")
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        try:
            with self._lock:
                if self._closed:
                    raise FailedPreconditionError("the manager is closed")
                harness = self._harness_locked(servable_id)
                harness.load_requested()
        except ServingError as error:
            future.set_exception(error)
            return future
        self._run_load(lambda: self._execute_load(harness, future), harness, future)
        return future

    def unload_servable(self, servable_id: ServableId) -> concurrent.futures.Future[None]:
        """Starts unloading a READY version; the future completes once it is unloaded.

        UNLOADING is published first, then the version stops being obtainable,
        then, once every handle taken before is released, it is unloaded and
        END published.  The future's exception is NotFoundError or
        FailedPreconditionError (not READY).
        """
        check_servable_id(servable_id, "unload_servable()")
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        try:
            with self._lock:
                harness = self._harness_locked(servable_id)
                harness.unload_requested()
        except ServingError as error:
            future.set_exception(error)
            return future
        with self._decision:
            self._pending_unloads += 1
        self._run(
            self._unload_pool,
            lambda: self._execute_unload(harness, future),
            harness,
            future,
            on_reject=lambda: self._load_or_unload_finished(unloads=1),
        )
        return future

    def cancel_load_servable_retry(self, servable_id: ServableId) -> None:
        """Stops retrying a failing load; a retry waiting for its turn fails at once (CANCELLED)."""
        check_servable_id(servable_id, "cancel_load_servable_retry()")
        with self._lock:
            harness = self._find_locked(servable_id)
            pending = self._retry_timers.pop(servable_id, None)
        if harness is not None:
            harness.cancel_load_retry()
        if pending is not None:
            timer, attempt = pending
            timer.cancel()
            self._submit_retry(attempt)

    def managed_servable_names(self) -> list[str]:
        """Names with at least one managed version, sorted."""
        with self._lock:
            return sorted(self._harnesses)

    def managed_servable_snapshots(self, name: str) -> list[ServableStateSnapshot]:
        """State snapshots of every managed version of ``name``, by version."""
        with self._lock:
            versions = sorted(self._harnesses.get(name, {}).items())
        return [ServableStateSnapshot(h.id, h.state, h.additional_state) for _, h in versions]

    def harness_error(self, servable_id: ServableId) -> ServingError | None:
        """The error of a managed version in ERROR, else None."""
        with self._lock:
            harness = self._find_locked(servable_id)
        return harness.error if harness is not None else None

    def held_handles(self) -> dict[ServableId, tuple[int, float]]:
        """Versions whose unload waits for handles: id → (handles held, seconds waited so far).

        Thread safety: any thread.
        """
        now = time.monotonic()
        with self._lock:
            waiting = list(self._quiescing.values())
        return {
            entry.id: (entry.handle_count, now - since)
            for entry, since in waiting
            if entry.handle_count > 0
        }

    def set_num_load_threads(self, num_threads: int) -> None:
        """Resizes the load pool (0: load on the requesting thread); loads running go on.

        ServerCore uses it for a fast initial load (many threads), then the
        steady-state size.  Thread safety: any thread.
        """
        if num_threads < 0:
            raise InvalidArgumentError(f"num_load_threads must be >= 0, got {num_threads}")
        with self._lock:
            if self._closed:
                return
            old, self._load_pool = self._load_pool, _pool(num_threads, "servinglib-load")
            if old is not None:
                old.shutdown(wait=False)  # queued and running loads still complete

    def close(self) -> None:
        """Cancels load retries, waits for running loads, unloads everything; idempotent.

        Handles still held delay close() until they are released; each
        version waiting for them is logged after 5 s, then every 60 s
        (:meth:`held_handles` lists them).
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            pending = list(self._retry_timers.values())
            self._retry_timers.clear()
            harnesses = self._all_locked()
        for harness in harnesses:
            harness.cancel_load_retry()
        for timer, attempt in pending:
            timer.cancel()
            attempt()
        with self._lock:
            load_pool = self._load_pool
        if load_pool is not None:
            load_pool.shutdown(wait=True)
        unloads = [self.unload_servable(h.id) for h in harnesses if h.state is HarnessState.READY]
        concurrent.futures.wait(unloads)
        if self._unload_pool is not None:
            self._unload_pool.shutdown(wait=True)
        with self._decision:
            parked, self._parked = self._parked, []
        for harness, future in parked:
            self._cancel(harness, future)

    def __enter__(self) -> BasicManager:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- load execution -----------------------------------------------------

    def _execute_load(
        self, harness: LoaderHarness, future: concurrent.futures.Future[None]
    ) -> None:
        if self._closed:
            self._cancel(harness, future)
            return
        verdict = self._approve_load(harness, future)
        if isinstance(verdict, _Parked):
            return
        if verdict is not None:
            harness.error_out(verdict)
            self._publish(harness.id, ManagerState.END, verdict)
            future.set_exception(verdict)
            return
        self._publish(harness.id, ManagerState.LOADING)
        harness.start_loading()
        self._attempt_load(harness, future)

    def _approve_load(
        self, harness: LoaderHarness, future: concurrent.futures.Future[None]
    ) -> ServingError | _Parked | None:
        """The decision phase: reserve resources, or park the load until others finish.

        A load that does not fit waits (parked, holding no thread) while loads
        execute or unloads are pending, since their end may free room; it
        fails with RESOURCE_EXHAUSTED only when nothing is in flight.
        """
        assert harness.loader is not None
        with self._decision:
            if self._tracker is not None:
                with self._lock:
                    holders = [h.loader for h in self._all_locked() if h.state in _HOLDS_RESOURCES]
                self._tracker.recompute_used_resources(
                    loader for loader in holders if loader is not None
                )
                if not self._tracker.reserve(harness.loader):
                    if self._executing_loads == 0 and self._pending_unloads == 0:
                        return ResourceExhaustedError(
                            f"Insufficient resources to load servable {harness.id}: it needs "
                            f"{harness.loader.estimate_resources()}, {self._tracker.used} of "
                            f"{self._tracker.total} is in use"
                        )
                    self._parked.append((harness, future))
                    return _PARKED
            harness.load_approved()
            self._executing_loads += 1
        return None

    def _attempt_load(
        self, harness: LoaderHarness, future: concurrent.futures.Future[None]
    ) -> None:
        """One load attempt; on success the version serves, on failure it ends in ERROR."""
        loader = harness.loader
        assert loader is not None  # only error data has none, and it never loads
        outcome = LoadOutcome.FAILED
        try:
            outcome = harness.attempt_load()
            if outcome is LoadOutcome.RETRY:
                self._schedule_retry(harness, future)
                return
            if outcome is LoadOutcome.LOADED:
                self._serving.add(harness.id, loader.servable())
                self._publish(harness.id, ManagerState.AVAILABLE)
                harness.ready()
                future.set_result(None)
            else:
                assert harness.error is not None
                self._publish(harness.id, ManagerState.END, harness.error)
                future.set_exception(harness.error)
        except Exception as exc:  # noqa: BLE001 - e.g. servable() raising: the version's error
            error = ServingError.wrap(exc, f"Serving servable {harness.id} failed")
            _log.exception("%s", error.message)
            if outcome is LoadOutcome.LOADED:
                self._serving.remove(harness.id)
                _unload_quietly(loader, harness.id)
            if harness.state not in (HarnessState.ERROR, HarnessState.DISABLED):
                harness.error_out(error)
            self._publish(harness.id, ManagerState.END, error)
            if not future.done():
                future.set_exception(error)
        finally:
            if outcome is not LoadOutcome.RETRY:
                self._load_or_unload_finished(loads=1)

    def _schedule_retry(
        self, harness: LoaderHarness, future: concurrent.futures.Future[None]
    ) -> None:
        def attempt() -> None:
            self._attempt_load(harness, future)

        def due() -> None:
            with self._lock:
                if self._retry_timers.pop(harness.id, None) is None:
                    return  # cancelled: cancel_load_servable_retry submitted it already
            self._submit_retry(attempt)

        with self._lock:
            timer = self._clock.call_later(harness.retry.load_retry_interval_s, due)
            self._retry_timers[harness.id] = (timer, attempt)
            closed = self._closed
        if closed or harness.retry_cancelled:
            self.cancel_load_servable_retry(harness.id)

    def _submit_retry(self, attempt: Callable[[], None]) -> None:
        with self._lock:
            pool = self._load_pool
            if pool is not None and not self._closed:
                pool.submit(attempt)
                return
        attempt()  # synchronous loads, or the manager closed while the retry waited

    def _load_or_unload_finished(self, *, loads: int = 0, unloads: int = 0) -> None:
        """Counts a load or unload as done, and gives parked loads another try."""
        with self._decision:
            self._executing_loads -= loads
            self._pending_unloads -= unloads
            parked, self._parked = self._parked, []
        for harness, future in parked:
            self._run_load(functools.partial(self._execute_load, harness, future), harness, future)

    # -- unload execution ---------------------------------------------------

    def _execute_unload(
        self, harness: LoaderHarness, future: concurrent.futures.Future[None]
    ) -> None:
        try:
            harness.start_quiescing()
            self._publish(harness.id, ManagerState.UNLOADING)
            entry = self._serving.remove(harness.id)
            if entry is not None:
                self._wait_for_handles(entry)
            harness.done_quiescing()
            harness.unload()
            self._publish(harness.id, ManagerState.END)
            future.set_result(None)
        finally:
            self._load_or_unload_finished(unloads=1)

    def _wait_for_handles(self, entry: ServingEntry) -> None:
        """Waits until no handle to ``entry`` is held, saying so while handles are held."""
        started = time.monotonic()
        with self._lock:
            self._quiescing[entry.id] = (entry, started)
        try:
            wait_s = _HELD_FIRST_REPORT_S
            while not entry.close_and_wait(wait_s):
                _log.warning(
                    "Unloading servable %s waits for %d handle(s) still held, for %.0f s so "
                    "far: release them (end the with-block of servable_handle) to let it finish",
                    entry.id,
                    entry.handle_count,
                    time.monotonic() - started,
                )
                wait_s = _HELD_REPORT_EVERY_S
        finally:
            with self._lock:
                del self._quiescing[entry.id]

    # -- serving map --------------------------------------------------------

    def _lookup_error(self, request: ServableRequest) -> ServingError:
        """NOT_FOUND for what is unknown or failed to load (naming its error), else UNAVAILABLE.

        A failed version will not serve unless it is loaded again, so a client
        must not retry it as it would a version still loading (TF Serving
        answers NOT_FOUND for both).
        """
        with self._lock:
            harnesses = dict(self._harnesses.get(request.name, {}))
        states = {v: h.state for v, h in harnesses.items()}
        if request.version is not None:
            state = states.get(request.version)
            if state is None:
                return NotFoundError(f"Servable not found for request: {request}")
            if state is HarnessState.ERROR:
                return _failed(harnesses[request.version])
            return UnavailableError(
                f"Servable {{name: {request.name} version: {request.version}}} is not available "
                f"(it is {state})"
            )
        if not states:
            return NotFoundError(f"Servable not found for request: {request}")
        if all(state is HarnessState.ERROR for state in states.values()):
            return _failed(harnesses[max(harnesses)])
        listed = ", ".join(f"{version}: {state}" for version, state in sorted(states.items()))
        return UnavailableError(
            f"No version of servable {request.name} is available yet for request {request} "
            f"(versions {listed})"
        )

    # -- helpers ------------------------------------------------------------

    def _find_locked(self, servable_id: ServableId) -> LoaderHarness | None:
        return self._harnesses.get(servable_id.name, {}).get(servable_id.version)

    def _all_locked(self) -> list[LoaderHarness]:
        return [h for versions in self._harnesses.values() for h in versions.values()]

    def _harness_locked(self, servable_id: ServableId) -> LoaderHarness:
        harness = self._find_locked(servable_id)
        if harness is None:
            raise NotFoundError(f"Servable {servable_id} is not being managed")
        return harness

    def _publish(
        self, servable_id: ServableId, state: ManagerState, error: ServingError | None = None
    ) -> None:
        self._bus.publish(ServableState(servable_id, state, error))

    def _run_load(
        self,
        task: Callable[[], None],
        harness: LoaderHarness,
        future: concurrent.futures.Future[None],
    ) -> None:
        """Runs a load task on the current load pool (read and used under the lock)."""
        with self._lock:
            pool = self._load_pool
            if pool is not None and not self._closed:
                pool.submit(self._guarded(task, harness, future))
                return
        self._run(pool, task, harness, future)

    def _run(
        self,
        pool: concurrent.futures.ThreadPoolExecutor | None,
        task: Callable[[], None],
        harness: LoaderHarness,
        future: concurrent.futures.Future[None],
        on_reject: Callable[[], None] | None = None,
    ) -> None:
        """Runs ``task`` on ``pool`` (or here); an unexpected exception errors the harness out.

        A pool already shut down (the manager closed) fails the future with
        CANCELLED and calls ``on_reject``.
        """

        guarded = self._guarded(task, harness, future)
        if pool is None:
            guarded()
            return
        try:
            pool.submit(guarded)
        except RuntimeError:
            self._cancel(harness, future)
            if on_reject is not None:
                on_reject()

    def _guarded(
        self,
        task: Callable[[], None],
        harness: LoaderHarness,
        future: concurrent.futures.Future[None],
    ) -> Callable[[], None]:
        """``task``, turning an unexpected exception into the servable's error."""

        def guarded() -> None:
            try:
                task()
            except Exception as exc:  # noqa: BLE001 - becomes the servable's error, never a dead thread
                _log.exception("internal error handling servable %s", harness.id)
                error = ServingError.wrap(exc, f"Internal error handling servable {harness.id}")
                if harness.state not in (HarnessState.ERROR, HarnessState.DISABLED):
                    harness.error_out(error)
                    self._publish(harness.id, ManagerState.END, error)
                if not future.done():
                    future.set_exception(error)

        return guarded

    def _cancel(self, harness: LoaderHarness, future: concurrent.futures.Future[None]) -> None:
        error = CancelledError(f"the manager closed before servable {harness.id} was handled")
        if harness.state not in (HarnessState.ERROR, HarnessState.DISABLED):
            harness.error_out(error)
        self._publish(harness.id, ManagerState.END, error)
        if not future.done():
            future.set_exception(error)


@final
class _Parked:
    """The decision phase's answer for a load waiting for room."""


_PARKED = _Parked()


def _unload_quietly(loader: Loader, servable_id: ServableId) -> None:
    try:
        loader.unload()
    except Exception:  # noqa: BLE001 - cleanup after a failure; the first error is what matters
        _log.exception("unload of servable %s after a failure raised; ignored", servable_id)


def _pool(num_threads: int, prefix: str) -> concurrent.futures.ThreadPoolExecutor | None:
    if num_threads == 0:
        return None
    return concurrent.futures.ThreadPoolExecutor(num_threads, thread_name_prefix=prefix)


def _failed(harness: LoaderHarness) -> NotFoundError:
    return NotFoundError(f"Servable {harness.id} failed to load: {harness.error}")
