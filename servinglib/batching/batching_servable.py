"""BatchingServable: a servable whose signatures merge concurrent requests into one model call."""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import time
from collections.abc import AsyncIterator, Hashable, Iterator, Mapping
from typing import Final, Self, final

import attrs

from servinglib.batching._batch_request import BatchRequest, Outputs, Settlements
from servinglib.batching.options import BatchingParameters
from servinglib.batching.scheduler import BatchQueue, SharedBatchScheduler
from servinglib.batching.tensor_ops import batch_key, merge, rows, split
from servinglib.errors import (
    CancelledError,
    DeadlineExceededError,
    ServingError,
)
from servinglib.servable import (
    ExecutionMode,
    ModelCall,
    Placement,
    Servable,
    SignatureSpec,
    Tensors,
    call_resolved,
    call_stages,
    deadline_exceeded,
    request_deadline,
    stages_scope,
)

_log = logging.getLogger(__name__)


@final
class BatchingServable(Servable):
    """Wraps a servable so that its batchable signatures run in batches.

    A signature is batched unless it is ASYNC (a coroutine cannot run on a
    batch thread), streaming (its parts go straight to their one caller),
    one of its tensors is known to have no batch
    dimension (rank 0), or the servable batches it itself
    (:meth:`Servable.batches_itself`); other signatures call the wrapped servable
    directly.  Batched signatures report ExecutionMode.ASYNC: front ends
    await the batch instead of holding a worker thread.  :meth:`call`
    (synchronous) blocks until the request's batch ran, bounded by the
    request's deadline (:func:`~servinglib.servable.request_deadline`).
    :meth:`close` closes the queues (after their batches) and then the
    wrapped servable.
    Thread-safe.
    """

    def __init__(
        self,
        servable: Servable,
        scheduler: SharedBatchScheduler,
        options: BatchingParameters,
        *,
        name: str = "servable",
    ) -> None:
        self._inner = servable
        self._options = options
        self._queues: dict[str, BatchQueue[_Task]] = {}
        signatures: dict[str, SignatureSpec] = {}
        for signature_name, spec in servable.signatures.items():
            if not _batchable(spec) or servable.batches_itself(signature_name):
                signatures[signature_name] = spec
                continue
            batcher = _SignatureBatcher(servable, signature_name, options)
            self._queues[signature_name] = scheduler.add_queue(
                f"{name}/{signature_name}", options, batcher.process
            )
            signatures[signature_name] = attrs.evolve(spec, execution_mode=ExecutionMode.ASYNC)
        self._signatures: Mapping[str, SignatureSpec] = signatures

    @property
    def wrapped(self) -> Servable:
        """The servable whose signatures this one batches."""
        return self._inner

    @property
    def batched_signatures(self) -> frozenset[str]:
        """The names of the signatures that run in batches."""
        return frozenset(self._queues)

    @property
    def signatures(self) -> Mapping[str, SignatureSpec]:
        return self._signatures

    def placement(self, signature_name: str) -> Placement | None:
        """The batch queue, for a batched signature; the wrapped servable's say otherwise."""
        if signature_name in self._queues:
            return _BATCH_QUEUE
        return self._inner.placement(signature_name)

    def call(
        self, signature_name: str, inputs: Tensors, output_filter: frozenset[str] | None = None
    ) -> Outputs:
        queue = self._queues.get(signature_name)
        if queue is None:
            return self._inner.call(signature_name, inputs, output_filter)
        request = _submit(queue, inputs, output_filter, None)
        deadline = request.deadline
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        future = request.future
        assert isinstance(future, concurrent.futures.Future)  # made without a loop
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise DeadlineExceededError(
                f"Deadline exceeded while waiting for a batch of {queue.name}"
            ) from None
        except concurrent.futures.CancelledError:
            raise CancelledError(f"The request to {queue.name} was cancelled") from None

    async def call_async(
        self, signature_name: str, inputs: Tensors, output_filter: frozenset[str] | None = None
    ) -> Outputs:
        queue = self._queues.get(signature_name)
        if queue is None:
            return await self._inner.call_async(signature_name, inputs, output_filter)
        request = _submit(queue, inputs, output_filter, asyncio.get_running_loop())
        # Cancelling the awaiting task (a front end's deadline) cancels this future, and a
        # batch thread then skips the request.
        future = request.future
        assert isinstance(future, asyncio.Future)  # made on this loop
        return await future

    def call_stream(
        self, signature_name: str, inputs: Tensors, output_filter: frozenset[str] | None = None
    ) -> Iterator[Outputs]:
        return self._inner.call_stream(signature_name, inputs, output_filter)  # never batched

    def call_stream_async(
        self, signature_name: str, inputs: Tensors, output_filter: frozenset[str] | None = None
    ) -> AsyncIterator[Outputs]:
        return self._inner.call_stream_async(signature_name, inputs, output_filter)

    def close(self) -> None:
        for queue in self._queues.values():
            queue.close()
        self._inner.close()


@final
class _BatchQueuePlacement(Placement):
    """A batched signature's calls wait in its batch queue and run in a batch: awaited on
    the event loop; a server thread blocks on the batch's result.  Thread-safe."""

    async def run(self, call: ModelCall) -> Outputs:
        return await call.run_async()

    def run_blocking(self, call: ModelCall) -> Outputs:
        stages = call.stages
        try:
            if call.deadline is not None and call.deadline <= time.monotonic():
                raise deadline_exceeded()
            stages.started_ns = stages.infer_started_ns = time.perf_counter_ns()
            with stages_scope(stages):  # the batch marks the stages it reaches
                outputs = call_resolved(
                    call.servable,
                    call.site.signature_name,
                    call.spec,
                    call.inputs,
                    call.output_filter,
                )
        finally:
            call.release()
        if not stages.batch_size:
            stages.infer_ended_ns = stages.ended_ns = time.perf_counter_ns()
        return outputs


_BATCH_QUEUE: Final = _BatchQueuePlacement()


def _batchable(spec: SignatureSpec) -> bool:
    if spec.execution_mode is ExecutionMode.ASYNC or spec.streaming:
        return False
    tensors = itertools.chain(spec.inputs.values(), spec.outputs.values())
    return all(tensor.shape is None or len(tensor.shape) > 0 for tensor in tensors)


def _submit(
    queue: BatchQueue[_Task],
    inputs: Tensors,
    output_filter: frozenset[str] | None,
    loop: asyncio.AbstractEventLoop | None,
) -> BatchRequest:
    size = rows(inputs)
    stages = call_stages()
    if stages is not None:
        stages.queued_ns = time.perf_counter_ns()
    request = BatchRequest(inputs, output_filter, size, request_deadline(), loop, stages=stages)
    queue.schedule(_Task(request, 0, size))
    return request


@final
class _Task:
    """Rows [start, stop) of a request: what a batch queue schedules (and may split)."""

    __slots__ = ("request", "start", "stop")

    def __init__(self, request: BatchRequest, start: int, stop: int) -> None:
        self.request = request
        self.start = start
        self.stop = stop

    @property
    def size(self) -> int:
        return self.stop - self.start

    def split(self, size: int) -> tuple[Self, Self]:
        middle = self.start + size
        return type(self)(self.request, self.start, middle), type(self)(
            self.request, middle, self.stop
        )

    def fail(self, error: ServingError) -> None:
        self.request.fail(error)

    def inputs(self) -> Tensors:
        request = self.request
        if self.start == 0 and self.stop == request.size:
            return request.inputs
        return {name: value[self.start : self.stop] for name, value in request.inputs.items()}


@final
class _SignatureBatcher:
    """Runs the batches of one signature: merge, pad, call once, split back."""

    def __init__(
        self, servable: Servable, signature_name: str, options: BatchingParameters
    ) -> None:
        self._servable = servable
        self._signature = signature_name
        self._options = options

    def process(self, tasks: list[_Task]) -> int:
        now = time.monotonic()
        started_ns = time.perf_counter_ns()
        settlements = Settlements()
        try:
            live = [task for task in tasks if task.request.live(now, settlements)]
            executed = 0
            for group in self._groups(live):
                executed += self._run(group, settlements, started_ns)
                started_ns = time.perf_counter_ns()
            return executed
        finally:
            settlements.flush()

    def _groups(self, tasks: list[_Task]) -> list[list[tuple[_Task, Tensors]]]:
        """Tasks whose inputs can merge, together (with padding on, all of them)."""
        groups: dict[Hashable, list[tuple[_Task, Tensors]]] = {}
        pad = self._options.pad_variable_length_inputs
        for task in tasks:
            inputs = task.inputs()
            key = _rank_key(inputs) if pad else batch_key(inputs)
            groups.setdefault(key, []).append((task, inputs))
        return list(groups.values())

    def _run(
        self, group: list[tuple[_Task, Tensors]], settlements: Settlements, started_ns: int
    ) -> int:
        tasks = [task for task, _ in group]
        sizes = [task.size for task in tasks]
        total = sum(sizes)
        padded = self._options.padded_size(total) if total else 0
        marks = [started_ns]
        try:
            merged = merge(
                [inputs for _, inputs in group],
                padded_size=padded,
                pad_variable_length=self._options.pad_variable_length_inputs,
            )
            marks.append(time.perf_counter_ns())
            outputs = self._servable.call(self._signature, merged, _union_filter(tasks))
            marks.append(time.perf_counter_ns())
            pieces = split(outputs, sizes, batch_size=padded)
            marks.append(time.perf_counter_ns())
            _mark_stages(tasks, marks, total)
        except Exception as error:  # noqa: BLE001 - the batch's requests get the error, no one else
            failure = (
                error
                if isinstance(error, ServingError)
                else ServingError.wrap(error, f"Signature '{self._signature}' failed")
            )
            for task in tasks:
                task.request.fail(failure, settlements)
            return padded
        for task, piece in zip(tasks, pieces, strict=True):
            task.request.deliver(task.start, task.size, piece, settlements)
        return padded


def _mark_stages(tasks: list[_Task], marks: list[int], batch_size: int) -> None:
    """Fills the callers' CallStages (before their futures settle): the batch's four marks."""
    started, merged, called, split_ns = marks
    leader = True
    for task in tasks:
        stages = task.request.stages
        if stages is None:
            continue
        stages.started_ns = started
        stages.infer_started_ns = merged
        stages.infer_ended_ns = called
        stages.ended_ns = split_ns
        stages.batch_size = batch_size
        stages.leads_batch = leader
        stages.rows = task.request.size
        leader = False


def _rank_key(inputs: Tensors) -> Hashable:
    return tuple((name, value.dtype, value.ndim) for name, value in sorted(inputs.items()))


def _union_filter(tasks: list[_Task]) -> frozenset[str] | None:
    wanted: set[str] = set()
    for task in tasks:
        requested = task.request.output_filter
        if requested is None:
            return None
        wanted |= requested
    return frozenset(wanted)
