"""Triton's sequence batcher: each sequence's requests run in order on the instance it sticks to.

:class:`SequenceBatcher` is the placement of a Triton model whose config sets
``sequence_batching``.  A request names its sequence (``sequence_id``) and whether it starts
or ends it (:class:`~servinglib.request_extras.RequestExtras`); the sequence holds a slot of
one instance from its start to its end (:mod:`~servinglib.loaders.triton.sequence_slots`),
and each instance runs batches of at most one request per sequence, the oldest first, when
its batch policy says (:mod:`~servinglib.loaders.triton.sequence_batch_policy`).  Empty
slots are not passed to the model.  The executor (the model) gets each request with its
flags and its sequence's state, and gives back its outputs and the next state.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections.abc import Callable
from collections.abc import Sequence as Seq
from time import monotonic, perf_counter_ns
from typing import Any, Protocol, final

import attrs
import numpy.typing as npt

from servinglib.batching.tensor_ops import rows
from servinglib.errors import InvalidArgumentError, ServingError, UnavailableError
from servinglib.loaders.triton.queued_call import QueuedCall, callers_scope, settle_all
from servinglib.loaders.triton.sequence_batch_policy import batch_size_now, size_at_once
from servinglib.loaders.triton.sequence_options import SequenceOptions
from servinglib.loaders.triton.sequence_slots import Sequence, SequenceRequest, SequenceSlots
from servinglib.request_extras import RequestExtras, request_extras
from servinglib.servable import (
    ModelCall,
    Placement,
    Tensors,
    check_call,
    deadline_exceeded,
)

_log = logging.getLogger("servinglib.server")

Outputs = dict[str, npt.NDArray[Any]]


@final
@attrs.frozen
class SequenceStep:
    """One request of a sequence as the model is to get it: its tensors, the outputs asked
    for (None: all), its extras, its deadline, its flags, and its sequence's state (None: the
    initial state).  Immutable, so thread-safe."""

    inputs: Tensors
    wanted: frozenset[str] | None
    extras: RequestExtras
    deadline: float | None
    start: bool
    end: bool
    state: Tensors | None


@final
@attrs.frozen
class StepResult:
    """A request's outputs and the state its sequence goes on with.  Immutable."""

    outputs: Outputs
    state: Tensors | None = None


class SequenceExecutor(Protocol):
    """What the batcher runs: a stateful model with several instances."""

    def check(self, inputs: Tensors, correlation_id: int | str) -> None:
        """Raises InvalidArgumentError for a request the model cannot take (a batch too
        large, a sequence id of the wrong type), on the caller's thread."""

    def execute_steps(
        self, instance: int, steps: Seq[SequenceStep]
    ) -> list[StepResult | ServingError]:
        """Runs ``steps`` (one per sequence) as one batch on ``instance``: each one's result."""


@final
@attrs.frozen
class SequenceStatistics:
    """A sequence model's sequences now: ``active`` (holding a slot or waiting for one), those
    of them in the ``backlog`` (waiting), and its ``slots`` (all instances').  Immutable."""

    active: int
    backlog: int
    slots: int = 0


@final
class SequenceBatcher(Placement):
    """Places each call in its sequence's queue; a thread per instance runs its batches.

    A request without a sequence id, or without ``sequence_start`` for a sequence that is
    not active, is INVALID_ARGUMENT naming the sequence and the model; a new sequence beyond
    a full backlog is UNAVAILABLE.  A request whose deadline passed while it waited fails
    with DEADLINE_EXCEEDED and is not handed to the model.  Thread-safe.
    """

    def __init__(
        self,
        executor: SequenceExecutor,
        options: SequenceOptions,
        *,
        model_name: str,
        clock: Callable[[], float] = monotonic,
    ) -> None:
        self._executor = executor
        self._options = options
        self._model = model_name
        self._clock = clock
        self._changed = threading.Condition()
        self._slots = SequenceSlots(  # guarded by: _changed
            model_name, options.instances, options.slots, options.max_backlog
        )
        self._closed = False  # guarded by: _changed
        self._threads = [
            threading.Thread(
                target=self._serve, args=(i,), name=f"{model_name}/sequences/{i}", daemon=True
            )
            for i in range(options.instances)
        ]
        for thread in self._threads:
            thread.start()

    async def run(self, call: ModelCall) -> Outputs:
        return await self._schedule(call, request_extras(), asyncio.get_running_loop()).answer()

    def run_blocking(self, call: ModelCall) -> Outputs:
        queued = self._schedule(call, request_extras(), None)
        deadline = call.deadline
        timeout = None if deadline is None else max(0.0, deadline - monotonic())
        try:
            return queued.future.result(timeout)
        except concurrent.futures.TimeoutError:
            queued.future.cancel()
            raise deadline_exceeded() from None

    def statistics(self) -> SequenceStatistics:
        """How many sequences are active and how many of them wait for a slot."""
        with self._changed:
            slots = self._slots
            return SequenceStatistics(slots.active, slots.backlog, slots.slots)

    def end_instance(self, instance: int, error: ServingError) -> None:
        """Ends every sequence holding a slot of ``instance``, whose process died with
        ``error``: their queued requests fail with UNAVAILABLE naming them, their state (in
        the dead process too) is gone, and their slots go to the backlog; a request of one
        of them without START is then refused as for any sequence that is not active.  The
        other instances' sequences go on.  Thread-safe.
        """
        failed: list[QueuedCall] = []
        ended: list[int | str] = []
        with self._changed:
            for sequence in list(self._slots.in_slots(instance)):
                ended.append(sequence.correlation_id)
                failed.extend(request.call for request in sequence.requests)
                sequence.requests.clear()
                if sequence.running:
                    sequence.lost = True  # its batch fails with the process; then it ends
                else:
                    self._slots.end(sequence)
            self._changed.notify_all()
        if not ended:
            return
        names = ", ".join(str(correlation_id) for correlation_id in ended)
        lost = UnavailableError(
            f"Model '{self._model}': {error.message}; its sequences {names} on that instance "
            "ended with it: start them again"
        )
        _log.error("%s", lost.message)
        for queued in failed:
            queued.fail(lost)

    def close(self) -> None:
        """Stops the instances' threads once the requests queued in slots have run.

        Requires: no call is on its way (the version unloads once its calls are released).
        """
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join()

    def _schedule(
        self, call: ModelCall, extras: RequestExtras, loop: asyncio.AbstractEventLoop | None
    ) -> QueuedCall:
        try:
            call.stages.queued_ns = perf_counter_ns()
            wanted = check_call(call.spec, call.inputs, call.output_filter)
            if call.deadline is not None and call.deadline <= monotonic():
                raise deadline_exceeded()
            if self._options.batch_dimension and rows(call.inputs) != 1:
                raise InvalidArgumentError(
                    f"inference request to model '{self._model}' must specify batch-size 1 "
                    "due to requirements of sequence batcher"
                )
            correlation_id = extras.correlation_id
            if correlation_id in (0, ""):
                raise InvalidArgumentError(
                    f"inference request to model '{self._model}' must specify a non-zero or "
                    "non-empty correlation ID (the request parameter sequence_id)"
                )
            self._executor.check(call.inputs, correlation_id)
            queued = QueuedCall(call, (wanted, extras), 1, loop)  # (one row: checked above)
            request = SequenceRequest(
                queued, start=extras.sequence_start, end=extras.sequence_end, arrived=self._clock()
            )
            with self._changed:
                if self._closed:
                    raise UnavailableError(f"Model '{self._model}' is unloading")
                sequence = self._slots.enqueue(correlation_id, request)
                if self._wakes_locked(sequence):
                    self._changed.notify_all()
        except BaseException:
            call.release()
            raise
        return queued

    def _wakes_locked(self, sequence: Sequence) -> bool:
        """Whether the request just queued for ``sequence`` may change what its instance's
        thread does now.  Waking it for every request costs a hand-over of the interpreter
        and a look at every slot per request; it looks anyway when its batch ends or its
        wait (the oldest request's queue delay, an idle sequence's end) is over.

        Only a sequence that becomes ready (it holds a slot, runs nothing, and queued
        nothing before) changes the ready set: the first one starts a queue delay, and one
        that makes a batch run at once (:func:`size_at_once` grows with the ready count)
        ends the wait.
        """
        instance = sequence.instance
        if instance is None or sequence.running or len(sequence.requests) > 1:
            return False
        ready = sum(1 for s in self._slots.in_slots(instance) if s.requests and not s.running)
        return ready == 1 or size_at_once(ready - 1, self._options) < size_at_once(
            ready, self._options
        )

    def _serve(self, instance: int) -> None:
        while True:
            with self._changed:
                batch = self._next_batch_locked(instance)
            if batch is None:
                return
            self._run(instance, batch)

    def _next_batch_locked(self, instance: int) -> list[_Taken] | None:
        """Waits until ``instance`` has a batch to run (None: closed); takes it."""
        while True:
            now = self._clock()
            for sequence in self._slots.idle(now, self._options.max_sequence_idle_s):
                _log.info(
                    "Model %s: sequence %s idle for max_sequence_idle_microseconds, ended",
                    self._model,
                    sequence.correlation_id,
                )
                self._slots.end(sequence)
                self._changed.notify_all()
            ready = sorted(
                (s for s in self._slots.in_slots(instance) if s.requests and not s.running),
                key=lambda s: s.requests[0].arrived,
            )
            arrivals = [sequence.requests[0].arrived for sequence in ready]
            size, due = batch_size_now(
                arrivals, self._options, float("inf") if self._closed else now
            )
            if size:
                return [_Taken.take(sequence) for sequence in ready[:size]]
            if self._closed:
                return None
            wake = [
                t for t in (due, self._slots.next_idle_at(self._options.max_sequence_idle_s)) if t
            ]
            self._changed.wait(max(0.0, min(wake) - now) if wake else None)

    def _run(self, instance: int, batch: list[_Taken]) -> None:
        started = perf_counter_ns()
        now = monotonic()
        live = [taken for taken in batch if taken.queued.start(now)]
        steps = [taken.step() for taken in live]
        outcomes: list[StepResult | ServingError] = []
        if steps:
            infer_started = perf_counter_ns()
            try:
                with callers_scope([taken.queued for taken in live]):
                    outcomes = self._executor.execute_steps(instance, steps)
            except Exception as exc:  # noqa: BLE001 - the executor's failure fails its requests
                error = ServingError.wrap(exc, "The sequence model failed")
                outcomes = [error for _ in steps]
            infer_ended = perf_counter_ns()
            size = sum(taken.queued.size for taken in live)
            for index, taken in enumerate(live):
                taken.queued.mark(started, infer_started, infer_ended, size, leads=index == 0)
        results = dict(zip(map(id, live), outcomes, strict=True))
        with self._changed:
            for taken in batch:
                self._finish_locked(taken, results.get(id(taken)))
            self._changed.notify_all()
        answers = [results[id(taken)] for taken in live]
        settle_all(
            [taken.queued for taken in live],
            [a if isinstance(a, ServingError) else a.outputs for a in answers],
        )

    def _finish_locked(self, taken: _Taken, outcome: StepResult | ServingError | None) -> None:
        """Records what a taken request left: its sequence's state, its end, its idle time."""
        sequence = taken.sequence
        sequence.running = False
        sequence.idle_since = self._clock()
        if outcome is None:  # not run: a START it carried starts the next one
            sequence.restart = sequence.restart or taken.start
        elif isinstance(outcome, StepResult):
            sequence.state = outcome.state
        if sequence.lost:  # its instance died: what it kept is gone
            sequence.lost, sequence.state = False, None
            if not sequence.requests:  # (a START queued since starts it again)
                self._slots.end(sequence)
        elif taken.request.end and not sequence.requests:
            self._slots.end(sequence)


@final
class _Taken:
    """A request taken from its sequence's queue into a batch.  Not thread-safe."""

    __slots__ = ("queued", "request", "sequence", "start", "state")

    def __init__(self, sequence: Sequence, request: SequenceRequest, *, start: bool) -> None:
        self.sequence = sequence
        self.request = request
        self.queued: QueuedCall = request.call
        self.start = start
        self.state = None if start else sequence.state

    @classmethod
    def take(cls, sequence: Sequence) -> _Taken:
        """The first queued request of ``sequence``, which now runs.  Requires: the lock."""
        request = sequence.requests.popleft()
        start = request.start or sequence.restart
        sequence.restart = False
        sequence.running = True
        return cls(sequence, request, start=start)

    def step(self) -> SequenceStep:
        wanted, extras = self.queued.pending
        call = self.queued.call
        return SequenceStep(
            call.inputs, wanted, extras, call.deadline, self.start, self.request.end, self.state
        )
