"""ServableHarness: one Loader in a real manager, stepped by hand, called as front ends call."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from typing import Any, final

import numpy.typing as npt

from servinglib.batching.options import BatchingParameters
from servinglib.batching.scheduler import SharedBatchScheduler
from servinglib.core.aspired_versions_manager import AspiredVersionsManager
from servinglib.core.availability_preserving_policy import AvailabilityPreservingPolicy
from servinglib.core.basic_manager import ManagerOptions
from servinglib.core.clock import Clock
from servinglib.core.loader import Loader
from servinglib.core.resource_tracker import ResourceTracker
from servinglib.core.servable_data import ServableData
from servinglib.core.servable_handle import ServableHandle
from servinglib.core.servable_id import ServableId
from servinglib.core.servable_request import ServableRequest
from servinglib.core.servable_state import ManagerState, ServableState
from servinglib.loaders.model_batching import ModelBatching
from servinglib.servable import (
    ExecutionMode,
    Servable,
    SignatureSpec,
    Tensors,
    call_signature,
    call_signature_async,
    checked_part,
    resolve_signature,
    start_stream,
)
from servinglib.testing._waiters import DEFAULT_TIMEOUT_S, run_until

_SETTLED = frozenset({ManagerState.AVAILABLE, ManagerState.END})


@final
class ServableHarness:
    """Serves one Loader from a real AspiredVersionsManager in this process, stepped by hand.

    ``loader`` is a Loader, or a factory called for each :meth:`load`.
    Entering the ``with`` block loads the version (unless ``load_on_enter``
    is False) and raises AssertionError, with the load's error as cause, if
    it does not become AVAILABLE; leaving it closes the manager (unloading).
    With load retries on a FakeClock use :meth:`aspire`, :meth:`run_once`
    and ``clock.advance`` instead of :meth:`load`.  ``batching``: serve the
    version through batch queues as a ServerCore does.  More:
    docs/guides/testing_loaders.md ("ServableHarness").
    Thread-safe (call from any thread; one thread steps).
    """

    def __init__(
        self,
        loader: Loader | Callable[[], Loader],
        *,
        name: str = "model",
        version: int = 1,
        options: ManagerOptions | None = None,
        resource_tracker: ResourceTracker | None = None,
        clock: Clock | None = None,
        load_on_enter: bool = True,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        batching: BatchingParameters | None = None,
    ) -> None:
        self._loader = loader
        self._batching = ModelBatching(batching) if batching is not None else None
        self._id = ServableId(name, version)
        self._load_on_enter = load_on_enter
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._events: list[ServableState] = []  # guarded by: _lock
        self._manager = AspiredVersionsManager(
            AvailabilityPreservingPolicy(),
            options,
            manage_state_interval_s=None,
            resource_tracker=resource_tracker,
            clock=clock,
        )
        self._subscription = self._manager.event_bus.subscribe(self._record)

    @property
    def servable_id(self) -> ServableId:
        """The name and version the loader is served as."""
        return self._id

    @property
    def manager(self) -> AspiredVersionsManager:
        """The manager serving the loader (for stepping and inspection)."""
        return self._manager

    @property
    def events(self) -> list[ServableState]:
        """Every state published so far, oldest first (a copy)."""
        with self._lock:
            return list(self._events)

    @property
    def states(self) -> list[ManagerState]:
        """The manager states of :attr:`servable_id` published so far, oldest first."""
        return [event.manager_state for event in self.events if event.id == self._id]

    @property
    def state(self) -> ServableState | None:
        """The last state of :attr:`servable_id`, or None before any."""
        mine = [event for event in self.events if event.id == self._id]
        return mine[-1] if mine else None

    @property
    def batch_scheduler(self) -> SharedBatchScheduler | None:
        """The batch scheduler (queue statistics); None without ``batching``."""
        return self._batching.scheduler if self._batching is not None else None

    def aspire(self) -> None:
        """Makes the version aspired (with a new loader, if given a factory); steps nothing."""
        loader = self._loader() if callable(self._loader) else self._loader
        if self._batching is not None:
            loader = self._batching.wrap_loader(self._id, loader)
        self._manager.set_aspired_versions(self._id.name, [ServableData.of(self._id, loader)])

    def load(self) -> ServableState:
        """Aspires the version and steps until it is AVAILABLE or ends; returns that state.

        Does not raise for a failed load: the returned state (END) holds the
        error as its ``health``.  Raises TimeoutError after ``timeout_s``.
        """
        current = self.state
        if current is not None and current.manager_state is ManagerState.AVAILABLE:
            return current
        seen = len(self.events)
        self.aspire()
        return self._step_until(seen, _SETTLED)

    def unload(self) -> ServableState:
        """Aspires no version and steps until the version ends; returns its END state."""
        seen = len(self.events)
        self._manager.set_aspired_versions(self._id.name, [])
        return self._step_until(seen, frozenset({ManagerState.END}))

    def run_once(self) -> bool:
        """One manager step (see AspiredVersionsManager.run_once)."""
        return self._manager.run_once()

    def handle(self) -> ServableHandle[Any]:
        """A handle to the version (release it: ``with harness.handle() as handle:``).

        Raises NotFoundError / UnavailableError while the version does not serve.
        """
        return self._manager.servable_handle(ServableRequest.from_id(self._id))

    def call(
        self,
        signature_name: str | None,
        inputs: Tensors,
        output_filter: Iterable[str] | None = None,
    ) -> dict[str, npt.NDArray[Any]]:
        """Calls a signature as the front ends do: a handle, then ``call_signature``.

        ``signature_name`` None or "" is ``serving_default``; an ASYNC
        signature runs in a new event loop.  Raises what a request would get
        (NotFoundError, FailedPreconditionError for an unknown signature,
        InvalidArgumentError for inputs that do not fit, ...), and TypeError
        if the servable is not a servinglib Servable.
        """
        with self.handle() as handle:
            servable = self._servable_of(handle)
            _, spec = resolve_signature(servable, signature_name)
            if spec.execution_mode is ExecutionMode.ASYNC:
                return asyncio.run(
                    call_signature_async(servable, signature_name, inputs, output_filter)
                )
            return call_signature(servable, signature_name, inputs, output_filter)

    def call_stream(
        self, signature_name: str | None, inputs: Tensors
    ) -> list[dict[str, npt.NDArray[Any]]]:
        """Reads a streaming signature to its end as the front ends do (``start_stream``, each
        part checked); its parts, in order.

        Raises what a request would get, also an error the stream ends with
        after some parts (those are lost then: the error is what a client sees last).
        """
        with self.handle() as handle:
            servable = self._servable_of(handle)
            name, spec = resolve_signature(servable, signature_name)
            parts, wanted = start_stream(servable, name, spec, inputs)
            if not isinstance(parts, Iterator):
                return asyncio.run(_read_async(name, spec, wanted, parts))
            try:
                return [checked_part(name, spec, wanted, part) for part in parts]
            finally:
                close = getattr(parts, "close", None)
                if close is not None:
                    close()

    def call_concurrently(
        self, signature_name: str | None, requests: Iterable[Tensors]
    ) -> list[dict[str, npt.NDArray[Any]]]:
        """Sends all ``requests`` at once, as concurrent clients would; their results, in order.

        ASYNC (and batched) signatures are awaited together on one event
        loop, others run on one thread each, so with ``batching`` the
        requests share model calls.  Raises the first request's error.
        """
        with self.handle() as handle:
            servable = self._servable_of(handle)
            _, spec = resolve_signature(servable, signature_name)
            batch = list(requests)
            if spec.execution_mode is ExecutionMode.ASYNC:

                async def gather() -> list[dict[str, npt.NDArray[Any]]]:
                    calls = [call_signature_async(servable, signature_name, r) for r in batch]
                    return list(await asyncio.gather(*calls))

                return asyncio.run(gather())
            with concurrent.futures.ThreadPoolExecutor(max(1, len(batch))) as pool:
                futures = [pool.submit(call_signature, servable, signature_name, r) for r in batch]
                return [future.result() for future in futures]

    def _servable_of(self, handle: ServableHandle[Any]) -> Servable:
        servable = handle.servable
        if not isinstance(servable, Servable):
            raise TypeError(
                f"servable {self._id} is a {type(servable).__name__}, not a servinglib "
                "Servable: use handle() to reach it"
            )
        return servable

    def close(self) -> None:
        """Closes the manager, unloading the version (its events are recorded); idempotent."""
        self._manager.close()
        self._subscription.cancel()
        if self._batching is not None:
            self._batching.close()

    def __enter__(self) -> ServableHarness:
        if self._load_on_enter:
            state = self.load()
            if state.manager_state is not ManagerState.AVAILABLE:
                self.close()
                raise AssertionError(
                    f"servable {self._id} did not become AVAILABLE: it ended in "
                    f"{state.manager_state} with error {state.health!r}"
                ) from state.health
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _record(self, event: ServableState) -> None:
        with self._lock:
            self._events.append(event)

    def _step_until(self, seen: int, states: frozenset[ManagerState]) -> ServableState:
        def settled() -> ServableState | None:
            for event in self.events[seen:]:
                if event.id == self._id and event.manager_state in states:
                    return event
            return None

        try:
            run_until(self._manager, lambda: settled() is not None, timeout_s=self._timeout_s)
        except TimeoutError:
            wanted = " or ".join(sorted(str(s) for s in states))
            raise TimeoutError(
                f"servable {self._id} did not reach {wanted} within {self._timeout_s} s; its "
                f"states so far: {', '.join(map(str, self.states)) or 'none'}"
            ) from None
        reached = settled()
        assert reached is not None  # run_until returned, so the predicate held
        return reached


async def _read_async(
    name: str, spec: SignatureSpec, wanted: frozenset[str] | None, parts: AsyncIterator[Any]
) -> list[dict[str, npt.NDArray[Any]]]:
    try:
        return [checked_part(name, spec, wanted, part) async for part in parts]
    finally:
        close = getattr(parts, "aclose", None)
        if close is not None:
            await close()
