"""Triton's dynamic batching of a Python model: queued requests handed to ``execute`` as a list.

:class:`RequestBatching` is the placement of a Triton Python model whose config sets
``dynamic_batching``: each call waits in a batch queue of a :class:`SharedBatchScheduler`
of its own, and a batch's requests go to one ``execute(requests)``, not merged, each
answered by its own response (or failing alone with its own error).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Sequence
from time import monotonic, perf_counter_ns
from typing import Any, Protocol, final

import attrs
import numpy.typing as npt

from servinglib.batching.options import BatchingParameters
from servinglib.batching.scheduler import QueueStatistics, SharedBatchScheduler
from servinglib.batching.tensor_ops import rows
from servinglib.errors import ServingError, UnavailableError
from servinglib.loaders.triton.config import TritonModelConfig, batching_parameters
from servinglib.loaders.triton.queued_call import QueuedCall, callers_scope, settle_all
from servinglib.servable import (
    ModelCall,
    Placement,
    Tensors,
    check_call,
    deadline_exceeded,
)

Outputs = dict[str, npt.NDArray[Any]]


class RequestExecutor(Protocol):
    """What the placement runs: a model taking several requests at once."""

    def pending(self, inputs: Tensors, output_filter: frozenset[str] | None = None) -> Any:  # noqa: ANN401 - the executor's own request record
        """One request, made on the caller's thread (its deadline, id and parameters)."""

    def execute_requests(self, requests: Sequence[Any]) -> list[Outputs | ServingError]:
        """Runs the requests in one ``execute``: each one's outputs, or its error."""


@final
class RequestBatching(Placement):
    """Calls wait in a batch queue; a batch runs as one ``execute`` of its requests' list.

    A batch holds up to ``parameters.max_batch_size`` rows (each request's rows counted),
    runs once ``batch_timeout_s`` has passed since its first request, or at once when full
    or at a preferred size; ``max_queue_size`` (> 0) bounds the requests waiting (beyond:
    UNAVAILABLE, as Triton).  A request whose deadline passed while it waited fails with
    DEADLINE_EXCEEDED and is not handed to the model.  ``threads`` batches run at once (a
    model of N instances: N).  :meth:`close` runs what is queued.
    Thread-safe.
    """

    def __init__(
        self,
        executor: RequestExecutor,
        parameters: BatchingParameters,
        *,
        name: str,
        max_queue_size: int = 0,
        threads: int = 1,
    ) -> None:
        self._executor = executor
        self._max_queue_size = max_queue_size
        self._lock = threading.Lock()
        self._waiting = 0  # guarded by: _lock; requests scheduled, not yet in a batch
        self._scheduler = SharedBatchScheduler(threads, thread_pool_name=f"{name}/batch")
        self._queue = self._scheduler.add_queue(name, parameters, self._process)

    async def run(self, call: ModelCall) -> Outputs:
        return await self._schedule(call, asyncio.get_running_loop()).answer()

    def run_blocking(self, call: ModelCall) -> Outputs:
        task = self._schedule(call, None)
        deadline = call.deadline
        timeout = None if deadline is None else max(0.0, deadline - monotonic())
        try:
            return task.future.result(timeout)
        except concurrent.futures.TimeoutError:
            task.future.cancel()
            raise deadline_exceeded() from None

    def statistics(self) -> QueueStatistics:
        """The batch queue's depth now and its totals so far."""
        return self._queue.statistics()

    def close(self) -> None:
        """Runs the queued batches, then stops the batch thread."""
        self._queue.close()
        self._scheduler.close()

    def _schedule(self, call: ModelCall, loop: asyncio.AbstractEventLoop | None) -> QueuedCall:
        try:
            call.stages.queued_ns = perf_counter_ns()
            wanted = check_call(call.spec, call.inputs, call.output_filter)
            if call.deadline is not None and call.deadline <= monotonic():
                raise deadline_exceeded()
            pending = self._executor.pending(call.inputs, wanted)
            task = QueuedCall(call, pending, rows(call.inputs), loop)
            with self._lock:
                if self._max_queue_size and self._waiting >= self._max_queue_size:
                    raise UnavailableError("Exceeds maximum queue size")
                self._waiting += 1
            try:
                self._queue.schedule(task)
            except ServingError:
                with self._lock:
                    self._waiting -= 1
                raise
        except BaseException:
            call.release()
            raise
        return task

    def _process(self, tasks: list[QueuedCall]) -> int:
        with self._lock:
            self._waiting -= len(tasks)
        started = perf_counter_ns()
        now = monotonic()
        live = [task for task in tasks if task.start(now)]
        if not live:
            return 0
        size = sum(task.size for task in live)
        infer_started = perf_counter_ns()
        try:
            with callers_scope(live):
                outcomes = self._executor.execute_requests([task.pending for task in live])
        finally:
            infer_ended = perf_counter_ns()
            for index, task in enumerate(live):
                task.mark(started, infer_started, infer_ended, size, leads=index == 0)
        settle_all(live, outcomes)
        return size


def request_batching(
    executor: RequestExecutor, config: TritonModelConfig, version: int, threads: int = 1
) -> RequestBatching | None:
    """The placement of a model whose ``config`` sets ``dynamic_batching``; None if it does
    not (or ``max_batch_size`` is 0: Triton then runs each request alone).  ``threads``:
    batches run at once (one per instance of the model)."""
    parameters = batching_parameters(config)
    if parameters is None:
        return None
    queue_size = config.message.dynamic_batching.default_queue_policy.max_queue_size
    if queue_size:  # counted in requests here; a batch holds one at least
        parameters = attrs.evolve(
            parameters, max_enqueued_batches=max(parameters.max_enqueued_batches, queue_size)
        )
    name = f"{config.message.name}/{version}"
    return RequestBatching(
        executor, parameters, name=name, max_queue_size=queue_size, threads=threads
    )
