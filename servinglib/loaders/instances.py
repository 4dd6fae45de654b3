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
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, cast, final

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
    waits for a free instance within the request's deadline.  :meth:`close` closes every
    instance.  Thread-safe.
    """

    def __init__(
        self,
        instances: Sequence[Servable],
        batching: Callable[[InstancesServable], Placement | None] | None = None,
    ) -> None:
        if not instances:
            raise InvalidArgumentError("A model needs at least one instance")
        self._instances = tuple(instances)
        self._free = _FreeInstances(self._instances)
        self._placement = InstancePlacement(self._free)
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
    placement's own (one per instance) does.  Thread-safe.
    """

    def __init__(self, free: _FreeInstances) -> None:
        self._free = free
        self._threads = concurrent.futures.ThreadPoolExecutor(
            free.count, thread_name_prefix="servinglib-instance"
        )

    async def run(self, call: ModelCall) -> _Outputs:
        deadline = call.deadline
        if deadline is not None and deadline <= time.monotonic():
            call.release()
            raise deadline_exceeded()
        call.stages.queued_ns = time.perf_counter_ns()
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

    def _run_here(self, call: ModelCall) -> _Outputs:
        try:
            index = self._free.acquire(call.deadline)
            try:
                return call.stages.call(
                    self._free.instances[index],
                    call.site.signature_name,
                    call.spec,
                    call.inputs,
                    call.output_filter,
                )
            finally:
                self._free.release(index)
        finally:
            call.release()


@final
class _FreeInstances:
    """Which instances are free; waiters served first come, first served.

    :meth:`acquire` prefers an instance that serves (a model process being restarted does
    not) over one that does not.  :meth:`release` hands the instance to the first waiter
    directly, waking that one thread only.  Thread-safe.
    """

    def __init__(self, instances: Sequence[Servable]) -> None:
        self.instances = tuple(instances)
        self.count = len(self.instances)
        self._lock = threading.Lock()
        self._free = collections.deque(range(self.count))  # guarded by: _lock
        self._waiting: collections.deque[_Waiter] = collections.deque()  # guarded by: _lock

    def acquire(self, deadline: float | None) -> int:
        """A free instance's index, once one is free and no earlier caller waits for one.

        Raises DeadlineExceededError when ``deadline`` (``time.monotonic()``) passes first.
        """
        with self._lock:
            if self._free and not self._waiting:
                return self._take_locked()
            waiter = _Waiter()
            self._waiting.append(waiter)
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not waiter.given.wait(timeout):
            with self._lock:
                if waiter.index is None:
                    self._waiting.remove(waiter)
                    raise deadline_exceeded()
        assert waiter.index is not None  # (given just as the deadline passed)
        return waiter.index

    def release(self, index: int) -> None:
        """Frees the instance ``acquire`` returned (to the first waiter, if one waits)."""
        with self._lock:
            self._free.append(index)
            if not self._waiting:
                return
            waiter = self._waiting.popleft()
            waiter.index = self._take_locked()
        waiter.given.set()

    def _take_locked(self) -> int:
        for index in self._free:
            if getattr(self.instances[index], "serving", True):
                self._free.remove(index)
                return index
        return self._free.popleft()  # none serves: its call fails at once, saying why


@final
class _Waiter:
    """A caller of :meth:`_FreeInstances.acquire` waiting for an instance."""

    __slots__ = ("given", "index")

    def __init__(self) -> None:
        self.given = threading.Event()
        self.index: int | None = None  # set, under the instances' lock, before given


@final
class InstancesLoader(ModelLoader):
    """Loads ``count`` instances of a version with ``start(path, index)`` and serves them as
    one :class:`InstancesServable` (``batching``: its batching placement, see there), or as
    ``serve(instances)`` makes them one servable (a sequence batcher in front of them).

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
    ) -> None:
        super().__init__(path, warmup)
        self._count = count
        self._start = start
        self._batching = batching
        self._serve = serve

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
        return InstancesServable(instances, self._batching)

    def _unload_servable(self, servable: Servable) -> None:
        servable.close()  # (a wrapper served in its place may not have closed it)
