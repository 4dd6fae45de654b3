"""Model instances: N copies of a version, each call run on a free one (``instance_group``).

:class:`InstancesServable` serves the signatures of N instance servables (model processes,
for Python models: one interpreter lock each) and places each call on a free instance
(:class:`InstancePlacement`): a call waits, first come first served, within its deadline,
while every instance is busy.  An instance whose process died fails its calls and is
restarted by its :class:`~servinglib.loaders.process.ProcessServable`; meanwhile calls go to
the instances that serve.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextvars
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol, cast, final, runtime_checkable

import numpy.typing as npt

from servinglib.errors import InvalidArgumentError, ServingError
from servinglib.loaders.model_loader import ModelLoader
from servinglib.loaders.warmup import WarmupOptions
from servinglib.servable import (
    ExecutionMode,
    ModelCall,
    Placement,
    Servable,
    SignatureSpec,
    Tensors,
    deadline_exceeded,
    request_deadline,
    within_deadline,
)

_Outputs = dict[str, npt.NDArray[Any]]


class _Executor(Protocol):
    """An instance that runs several requests in one call (a model process does)."""

    def pending(self, inputs: Tensors, output_filter: frozenset[str] | None) -> Any: ...  # noqa: ANN401 - the instance's own record

    def execute_requests(self, requests: Sequence[Any]) -> list[_Outputs | ServingError]: ...


@final
class InstancesServable(Servable):
    """The signatures of ``instances`` (the first one's), each call run on a free instance.

    Requires: every instance serves the same signatures, none streaming (streams run on
    the first instance).  ``thread`` and ``inline`` signatures are placed by
    :class:`InstancePlacement`, or, given ``batching`` (``batching(self)``: a placement that
    gathers calls into batches, such as Triton's dynamic batching, run by
    :meth:`execute_requests` on a free instance), by that; :meth:`call` (for embedding code)
    waits for a free instance within the request's deadline.  ``batch_dimension``: the
    instances' dimension 0 is the batch (Triton's ``max_batch_size`` > 0): a call placed here
    counts as a batch of its rows.  :meth:`close` closes every instance.  Thread-safe.
    """

    def __init__(
        self,
        instances: Sequence[Servable],
        batching: Callable[[InstancesServable], Placement | None] | None = None,
        *,
        batch_dimension: bool = False,
    ) -> None:
        if not instances:
            raise InvalidArgumentError("A model needs at least one instance")
        self._instances = tuple(instances)
        self._free = _FreeInstances(self._instances)
        self._placement = InstancePlacement(self._free, batch_dimension=batch_dimension)
        self._batching = batching(self) if batching is not None else None

    @property
    def instances(self) -> Sequence[Servable]:
        """The instance servables, in order."""
        return self._instances

    @property
    def signatures(self) -> Mapping[str, SignatureSpec]:
        return self._instances[0].signatures

    def call(
        self, signature_name: str, inputs: Tensors, output_filter: frozenset[str] | None = None
    ) -> _Outputs:
        index = self._free.acquire(request_deadline())
        try:
            return self._instances[index].call(signature_name, inputs, output_filter)
        finally:
            self._free.release(index)

    def placement(self, signature_name: str) -> Placement | None:
        spec = self.signatures[signature_name]
        if spec.streaming or spec.execution_mode is ExecutionMode.ASYNC:
            return None  # (model processes serve neither; an in-process instance: the first)
        return self._batching or self._placement

    def pending(self, inputs: Tensors, output_filter: frozenset[str] | None = None) -> Any:  # noqa: ANN401 - the instances' own request record
        """One request for :meth:`execute_requests` (as the instances make it).

        Requires: the instances run several requests at once (``pending`` and
        ``execute_requests``, as a :class:`~servinglib.loaders.process.ProcessServable` does).
        """
        executor: _Executor = cast("_Executor", self._instances[0])
        return executor.pending(inputs, output_filter)

    def execute_requests(self, requests: Sequence[Any]) -> list[_Outputs | ServingError]:
        """Runs ``requests`` together on a free instance (waiting for one): the batches of a
        batching placement (``batching``), each request's outputs or error."""
        index = self._free.acquire(None)
        try:
            executor: _Executor = cast("_Executor", self._instances[index])
            return executor.execute_requests(requests)
        except ServingError as error:  # the instance failed them all (its process died, ...)
            return [error] * len(requests)
        finally:
            self._free.release(index)

    def close(self) -> None:
        if self._batching is not None:
            self._batching.close()  # runs what is queued, while the instances still serve
        self._placement.close()
        for instance in self._instances:
            instance.close()


@final
class InstancePlacement(Placement):
    """Runs each call on a free instance of its servable, waiting FIFO within the deadline.

    A server thread waits and runs the call itself; for an event loop a thread of the
    placement's own (one per instance) does.  ``batch_dimension``: a call is marked as a
    batch of its rows (:meth:`CallStages.batch_of_rows`).  Thread-safe.
    """

    def __init__(self, free: _FreeInstances, *, batch_dimension: bool = False) -> None:
        self._free = free
        self._batch_dimension = batch_dimension
        # instances answer a call on the event loop (model processes: all alike), or None
        first = free.instances[0]
        alike = all(isinstance(i, _LoopCaller) for i in free.instances[1:])
        self._on_loop = first if isinstance(first, _LoopCaller) and alike else None
        self._threads = concurrent.futures.ThreadPoolExecutor(
            free.count, thread_name_prefix="servinglib-instance"
        )

    async def run(self, call: ModelCall) -> _Outputs:
        deadline = call.deadline
        if deadline is not None and deadline <= time.monotonic():
            call.release()
            raise deadline_exceeded()
        call.stages.queued_ns = time.perf_counter_ns()
        if self._on_loop is not None and self._on_loop.answers_on_loop(call.inputs):
            try:
                return await self._run_on_loop(call)
            finally:
                call.release()
        try:
            # In the request's context: its deadline, extras and model caller go with the call.
            context = contextvars.copy_context()
            future = self._threads.submit(context.run, self._run_here, call)
        except BaseException:  # not queued (closed): nobody else releases it
            call.release()
            raise
        future.add_done_callback(lambda done: call.release() if done.cancelled() else None)
        try:
            return await within_deadline(asyncio.wrap_future(future), deadline)
        except BaseException:
            future.cancel()  # a call still waiting for a thread never runs
            raise

    def run_blocking(self, call: ModelCall) -> _Outputs:
        call.stages.queued_ns = time.perf_counter_ns()
        return self._run_here(call)

    def close(self) -> None:
        """Stops the placement's threads once their calls have ended."""
        self._threads.shutdown(wait=False, cancel_futures=True)

    async def _run_on_loop(self, call: ModelCall) -> _Outputs:
        """Runs ``call`` on a free instance without a thread (:class:`_LoopCaller`)."""
        index = await self._free.acquire_async(call.deadline)
        try:
            outputs = await call.stages.call_async(*self._on(index, call))
        finally:
            self._free.release(index)
        if self._batch_dimension:
            call.stages.batch_of_rows(call.inputs)
        return outputs

    def _run_here(self, call: ModelCall) -> _Outputs:
        try:
            index = self._free.acquire(call.deadline)
            try:
                outputs = call.stages.call(*self._on(index, call))
            finally:
                self._free.release(index)
            if self._batch_dimension:
                call.stages.batch_of_rows(call.inputs)
            return outputs
        finally:
            call.release()

    def _on(
        self, index: int, call: ModelCall
    ) -> tuple[Servable, str, SignatureSpec, Tensors, Iterable[str] | None]:
        """``call``'s arguments of :meth:`CallStages.call` on instance ``index``."""
        site = call.site
        return (
            self._free.instances[index],
            site.signature_name,
            call.spec,
            call.inputs,
            call.output_filter,
        )


@final
class _FreeInstances:
    """Which instances are free; waiters served first come, first served.

    An instance takes one call at a time, or two when it queues calls (a model process that
    runs one call at a time: the second waits in its socket and starts the moment the first
    ends, with no wait for the server to send it).  :meth:`acquire` prefers an instance that
    serves (a model process being restarted does not), then one with fewer calls, then the
    one that took a call least recently.  :meth:`release` hands the place to the first
    waiter directly, waking that one waiter only.  Thread-safe.
    """

    def __init__(self, instances: Sequence[Servable]) -> None:
        self.instances = tuple(instances)
        self.count = len(self.instances)
        queue = all(getattr(i, "queues_calls", False) for i in self.instances)
        self._depth = 2 if queue else 1  # calls an instance takes at once
        self._lock = threading.Lock()
        self._calls = [0] * self.count  # each instance's calls; guarded by: _lock
        self._places = self.count * self._depth  # calls more they take; guarded by: _lock
        # the instances, the one that took a call least recently first; guarded by: _lock
        self._order = collections.deque(range(self.count))
        self._waiting: collections.deque[_Waiter] = collections.deque()  # guarded by: _lock

    def acquire(self, deadline: float | None) -> int:
        """A free instance's index, once one is free and no earlier caller waits for one.

        Raises DeadlineExceededError when ``deadline`` (``time.monotonic()``) passes first.
        """
        with self._lock:
            if self._places and not self._waiting:
                return self._take_locked()
            given = threading.Event()
            waiter = _Waiter(given)
            self._waiting.append(waiter)
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not given.wait(timeout):
            with self._lock:
                if waiter.index is None:
                    self._waiting.remove(waiter)
                    raise deadline_exceeded()
        assert waiter.index is not None  # (given just as the deadline passed)
        return waiter.index

    async def acquire_async(self, deadline: float | None) -> int:
        """:meth:`acquire` for an event loop: it waits without a thread."""
        with self._lock:
            if self._places and not self._waiting:
                return self._take_locked()
            given = _LoopEvent()
            waiter = _Waiter(given)
            self._waiting.append(waiter)
        try:
            await within_deadline(given.future, deadline)
        except BaseException:
            with self._lock:
                if waiter.index is None:
                    self._waiting.remove(waiter)
                    raise
            self.release(waiter.index)  # given as the wait ended: for the next waiter
            raise
        assert waiter.index is not None
        return waiter.index

    def release(self, index: int) -> None:
        """Frees the instance ``acquire`` returned (to the first waiter, if one waits)."""
        with self._lock:
            self._calls[index] -= 1
            self._places += 1
            if not self._waiting:
                return
            waiter = self._waiting.popleft()
            waiter.index = self._take_locked()
        if not waiter.wake():  # its event loop has closed: nobody takes the place
            self.release(waiter.index)

    def _take_locked(self) -> int:
        chosen, best = -1, (True, self._depth)
        for index in self._order:
            calls = self._calls[index]
            if calls < self._depth:
                # (none serves: a call fails at once, saying why)
                key = (not getattr(self.instances[index], "serving", True), calls)
                if key < best:
                    chosen, best = index, key
        self._order.remove(chosen)
        self._order.append(chosen)
        self._calls[chosen] += 1
        self._places -= 1
        return chosen


@final
class _Waiter:
    """A caller of :meth:`_FreeInstances.acquire` (or ``acquire_async``: ``given`` a
    :class:`_LoopEvent`) waiting for an instance."""

    __slots__ = ("given", "index")

    def __init__(self, given: threading.Event | _LoopEvent) -> None:
        self.given = given
        self.index: int | None = None  # set, under the instances' lock, before given

    def wake(self) -> bool:
        """Tells the waiter it was given ``index``; False when it can no longer hear it."""
        if isinstance(self.given, threading.Event):
            self.given.set()
            return True
        return self.given.set()


@final
class _LoopEvent:
    """What :meth:`_Waiter.given` is for a waiter on an event loop: ``set`` from any thread
    completes :attr:`future` on the waiter's loop."""

    __slots__ = ("_thread", "future")

    def __init__(self) -> None:
        self.future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._thread = threading.get_ident()

    def set(self) -> bool:
        """Completes the future (from its loop's thread: now); False once that loop has
        closed."""
        loop = self.future.get_loop()
        if loop.is_closed():
            return False
        if threading.get_ident() == self._thread:
            _complete(self.future)
            return True
        try:
            loop.call_soon_threadsafe(_complete, self.future)
        except RuntimeError:  # the loop has closed meanwhile
            return False
        return True


def _complete(future: asyncio.Future[None]) -> None:
    if not future.done():  # (cancelled: its waiter gave up)
        future.set_result(None)


@runtime_checkable
class _LoopCaller(Protocol):
    """An instance whose ``call_async`` answers on the event loop, with no thread, when
    ``answers_on_loop(inputs)`` (a :class:`~servinglib.loaders.process.ProcessServable`)."""

    def answers_on_loop(self, inputs: Tensors) -> bool: ...

    async def call_async(
        self, signature_name: str, inputs: Tensors, output_filter: frozenset[str] | None = None
    ) -> _Outputs: ...


@final
class InstancesLoader(ModelLoader):
    """Loads ``count`` instances of a version with ``start(path, index)`` and serves them as
    one :class:`InstancesServable` (``batching``: its batching placement, ``batch_dimension``:
    see there), or as ``serve(instances)`` makes them one servable (a sequence batcher in
    front of them).

    The instances load at once, each on a thread of its own; if one fails, those loaded are
    closed and the load fails with the error of the first that failed (by index).
    Thread safety: as :class:`~servinglib.core.loader.Loader` requires.
    """

    def __init__(
        self,
        path: str,
        count: int,
        start: Callable[[str, int], Servable],
        warmup: WarmupOptions | None = None,
        batching: Callable[[InstancesServable], Placement | None] | None = None,
        *,
        serve: Callable[[Sequence[Servable]], Servable] | None = None,
        batch_dimension: bool = False,
    ) -> None:
        super().__init__(path, warmup)
        self._count = count
        self._start = start
        self._batching = batching
        self._serve = serve
        self._batch_dimension = batch_dimension

    def _load_servable(self) -> Servable:
        with concurrent.futures.ThreadPoolExecutor(
            self._count, thread_name_prefix="servinglib-instance-load"
        ) as threads:
            starts = [threads.submit(self._start, self.path, i) for i in range(self._count)]
            concurrent.futures.wait(starts)
        failed = [start for start in starts if start.exception() is not None]
        if failed:
            for start in starts:
                if start.exception() is None:
                    start.result().close()
            failed[0].result()  # raises its error
        instances = [start.result() for start in starts]
        if self._serve is not None:
            try:
                return self._serve(instances)
            except BaseException:
                for instance in instances:
                    instance.close()
                raise
        return InstancesServable(instances, self._batching, batch_dimension=self._batch_dimension)

    def _unload_servable(self, servable: Servable) -> None:
        servable.close()  # (a wrapper served in its place may not have closed it)
