"""Triton's dynamic batching of a Python model: queued requests handed to ``execute`` as a list.

:class:`RequestBatching` is the placement of a Triton Python model whose config sets
``dynamic_batching``, as Triton's dynamic batcher: requests wait in a queue per priority level,
and each instance's thread, once its instance is free, takes the next batch from the queue's
head (level 1 first, arrival order within a level), up to ``max_batch_size`` rows; its
requests go to one ``execute(requests)``, not merged, each answered by its own response (or
failing alone with its own error).  The levels' queue policies (:mod:`.batch_queue_policy`)
bound each level and time its requests out.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import itertools
import threading
from collections.abc import Sequence
from time import monotonic, perf_counter_ns
from typing import Any, Protocol, final

import numpy.typing as npt

from servinglib.batching.scheduler import QueueStatistics
from servinglib.batching.tensor_ops import rows
from servinglib.errors import InvalidArgumentError, ServingError, UnavailableError
from servinglib.loaders.triton.batch_queue_policy import DynamicBatching, dynamic_batching
from servinglib.loaders.triton.config import TritonModelConfig
from servinglib.loaders.triton.queued_call import QueuedCall, callers_scope, settle_all
from servinglib.request_extras import request_extras
from servinglib.servable import (
    ModelCall,
    Placement,
    Tensors,
    check_call,
    deadline_exceeded,
)

Outputs = dict[str, npt.NDArray[Any]]

TIMEOUT_MESSAGE = "Request timeout expired"  # Triton's, for a request its queue timed out


class RequestExecutor(Protocol):
    """What the placement runs: a model taking several requests at once."""

    def pending(self, inputs: Tensors, output_filter: frozenset[str] | None = None) -> Any:  # noqa: ANN401 - the executor's own request record
        """One request, made on the caller's thread (its deadline, id and parameters)."""

    def execute_requests(self, requests: Sequence[Any]) -> list[Outputs | ServingError]:
        """Runs the requests in one ``execute``: each one's outputs, or its error."""


@final
class _Entry:
    """A request in its level's queue: its call, rows, arrival and when it times out."""

    __slots__ = ("arrived", "call", "expires", "inputs", "size")

    def __init__(
        self, call: QueuedCall, size: int, arrived: float, expires: float, inputs: object
    ) -> None:
        self.call = call
        self.size = size
        self.arrived = arrived
        self.expires = expires  # monotonic(); 0: never
        self.inputs = inputs  # the names of its inputs, where some are optional; else None


@final
class _Level:
    """One priority level: requests in time, then those delayed past their timeout."""

    __slots__ = ("delayed", "delays", "queue", "size_bound")

    def __init__(self, size_bound: int, delays: bool) -> None:
        self.queue: collections.deque[_Entry] = collections.deque()
        self.delayed: collections.deque[_Entry] = collections.deque()
        self.size_bound = size_bound  # 0: none of its own
        self.delays = delays  # a request past its timeout waits on, behind

    def __len__(self) -> int:
        return len(self.queue) + len(self.delayed)


@final
class RequestBatching(Placement):
    """Calls wait in their priority level's queue; each batch runs as one ``execute`` of its
    requests' list (see the module).

    A batch holds up to ``max_batch_size`` rows (each request's rows counted) and runs as soon
    as an instance is free and it is full, or its first requests add up to a preferred size
    (the largest such run; the rest waits on), or its oldest request has waited
    ``max_queue_delay_s``.  A request beyond a level's ``max_queue_size`` (or the batcher's
    bound) is UNAVAILABLE at once, as in Triton; one whose queue timeout passes before a batch
    takes it is UNAVAILABLE (REJECT) or waits behind (DELAY); one whose deadline passes, or
    whose caller leaves, is never handed to the model.  ``threads`` batches run at once (a
    model of N instances: N), each on a thread of the placement's.  With
    ``optional_inputs``, a batch holds only requests with the same inputs as its first.
    :meth:`close` runs what is queued.  Thread-safe.
    """

    def __init__(
        self,
        executor: RequestExecutor,
        options: DynamicBatching,
        *,
        name: str,
        threads: int = 1,
        optional_inputs: bool = False,
    ) -> None:
        self._executor = executor
        self._options = options
        self._name = name
        self._optional_inputs = optional_inputs
        self._timeouts = options.has_timeouts
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._levels: dict[int, _Level] = {}  # guarded by: _lock
        self._order: list[_Level] = []  # guarded by: _lock; by level, 1 first
        self._queued = 0  # guarded by: _lock; requests in the levels' queues
        self._queued_rows = 0  # guarded by: _lock
        self._idle = 0  # guarded by: _lock; threads waiting for a batch
        self._running = 0  # guarded by: _lock
        self._closed = False  # guarded by: _lock
        self._batches = self._tasks = self._rows = self._rejected = 0  # guarded by: _lock
        self._threads = [
            threading.Thread(target=self._work, name=f"{name}/batch-{i}", daemon=True)
            for i in range(threads)
        ]
        for thread in self._threads:
            thread.start()

    async def run(self, call: ModelCall) -> Outputs:
        loop = asyncio.get_running_loop()
        queued, expires = self._schedule(call, loop)
        if not expires:
            return await queued.answer()
        timer = loop.call_later(expires - monotonic(), self._time_out, queued)
        try:
            return await queued.answer()
        finally:
            timer.cancel()

    def run_blocking(self, call: ModelCall) -> Outputs:
        queued, expires = self._schedule(call, None)
        deadline = call.deadline
        if expires and (deadline is None or expires < deadline):
            try:
                return queued.future.result(max(0.0, expires - monotonic()))
            except concurrent.futures.TimeoutError:
                self._time_out(queued)  # fails it, unless a batch has taken it
        timeout = None if deadline is None else max(0.0, deadline - monotonic())
        try:
            return queued.future.result(timeout)
        except concurrent.futures.TimeoutError:
            queued.future.cancel()
            raise deadline_exceeded() from None

    def statistics(self) -> QueueStatistics:
        """The queue's depth now and its totals so far."""
        with self._lock:
            return QueueStatistics(
                self._name,
                self._queued,
                0,
                self._running,
                self._batches,
                self._tasks,
                self._rows,
                0,
                self._rejected,
            )

    def close(self) -> None:
        """Runs the queued requests, then stops the batch threads."""
        with self._lock:
            self._closed = True
            self._wake.notify_all()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join()

    # -- callers' side -----------------------------------------------------------------

    def _schedule(
        self, call: ModelCall, loop: asyncio.AbstractEventLoop | None
    ) -> tuple[QueuedCall, float]:
        """The call queued, and when its queue times it out (0: never; a DELAY policy's
        timeout is the batch threads' to apply)."""
        try:
            call.stages.queued_ns = perf_counter_ns()
            wanted = check_call(call.spec, call.inputs, call.output_filter)
            size = rows(call.inputs)
            options = self._options
            if size > options.max_batch_size:
                raise InvalidArgumentError(
                    f"A request of {size} rows is larger than the maximum batch size "
                    f"({options.max_batch_size}) of model {self._name}"
                )
            now = monotonic()
            if call.deadline is not None and call.deadline <= now:
                raise deadline_exceeded()
            extras = request_extras()
            level_number = options.level_of(extras.priority)
            policy = options.policy_of(level_number)
            timeout = policy.timeout_of(extras.timeout_us) if self._timeouts else 0.0
            queued = QueuedCall(call, self._executor.pending(call.inputs, wanted), size, loop)
            names = frozenset(call.inputs) if self._optional_inputs else None
            entry = _Entry(queued, size, now, now + timeout if timeout else 0.0, names)
            with self._lock:
                if self._closed:
                    raise UnavailableError(f"Model {self._name} is unloading")
                level = self._levels.get(level_number)
                if level is None:
                    level = self._add_level_locked(level_number)
                if self._full_locked(level):
                    # calls answered already (timed out, deadline, caller gone) hold no place
                    self._apply_policies_locked(now)
                    if self._full_locked(level):
                        self._rejected += 1
                        raise UnavailableError("Exceeds maximum queue size")
                level.queue.append(entry)
                self._queued += 1
                self._queued_rows += size
                if self._idle and self._worth_waking_locked():
                    self._wake.notify()
        except BaseException:
            call.release()
            raise
        return queued, 0.0 if policy.delay else entry.expires

    def _full_locked(self, level: _Level) -> bool:
        """Whether ``level`` takes no more: its policy's ``max_queue_size``, else the
        batcher's own bound on the requests of the levels without one (0: none)."""
        if level.size_bound:
            return len(level) >= level.size_bound
        return 0 < self._options.max_queued <= self._queued

    def _add_level_locked(self, number: int) -> _Level:
        policy = self._options.policy_of(number)
        level = self._levels[number] = _Level(policy.max_queue_size, policy.delay)
        self._order = [self._levels[n] for n in sorted(self._levels)]
        return level

    def _worth_waking_locked(self) -> bool:
        """Whether a request just queued may let a waiting thread run a batch now: it is the
        only one, or there is no delay, or the queue reached a full or preferred size.  Waking
        a thread for any other costs a hand-over of the interpreter per request."""
        options = self._options
        total = self._queued_rows
        return (
            self._queued == 1
            or options.max_queue_delay_s == 0
            or total >= options.max_batch_size
            or total in options.preferred_batch_sizes
        )

    def _time_out(self, queued: QueuedCall) -> None:
        """The queue's timeout of ``queued`` passed (REJECT): it fails unless a batch took it
        (it stays in its level's queue until a batch thread passes it over)."""
        if queued.withdraw(UnavailableError(TIMEOUT_MESSAGE)):
            with self._lock:
                self._rejected += 1

    # -- batch threads -----------------------------------------------------------------

    def _work(self) -> None:
        while True:
            with self._lock:
                batch = self._next_batch_locked()
                if batch is None:
                    return
                self._running += 1
            try:
                size = self._process(batch)
            finally:
                with self._lock:
                    self._running -= 1
                    self._batches += 1
                    self._tasks += len(batch)
                    self._rows += size

    def _next_batch_locked(self) -> list[_Entry] | None:
        """The next batch, waiting until one is due; None once closed and empty."""
        while True:
            now = monotonic()
            if self._timeouts:
                self._apply_policies_locked(now)
            batch, due = self._take_locked(now)
            if batch:
                return batch
            if self._closed and not self._queued:
                return None
            self._idle += 1
            try:
                self._wake.wait(None if due is None else max(0.0, due - now))
            finally:
                self._idle -= 1

    def _take_locked(self, now: float) -> tuple[list[_Entry], float | None]:
        """The batch to run now (empty: none), and when the head's batch is due if not now."""
        options = self._options
        limit = options.max_batch_size
        head: list[_Entry] = []
        size = preferred = 0
        full = False
        for entry in itertools.chain.from_iterable(
            itertools.chain(level.queue, level.delayed) for level in self._order
        ):
            if size + entry.size > limit or (head and entry.inputs != head[0].inputs):
                full = True  # (requests of other optional inputs than the first's: as Triton)
                break
            head.append(entry)
            size += entry.size
            if size in options.preferred_batch_sizes:
                preferred = len(head)
            if size == limit:
                full = True
                break
        if not head:
            return [], None
        if not (full or self._closed or options.max_queue_delay_s == 0):
            if preferred:
                head = head[:preferred]
            else:
                due = min(entry.arrived for entry in head) + options.max_queue_delay_s
                if now < due:
                    return [], due
        self._remove_locked(head)
        return head, None

    def _remove_locked(self, head: list[_Entry]) -> None:
        """Takes ``head`` (a prefix of the levels' order) out of the queues."""
        left = len(head)
        for level in self._order:
            for line in (level.queue, level.delayed):
                while left and line:
                    entry = line.popleft()
                    self._queued -= 1
                    self._queued_rows -= entry.size
                    left -= 1
            if not left:
                return

    def _apply_policies_locked(self, now: float) -> None:
        """Drops requests answered already (timed out, deadline, caller gone) and rejects
        those past a REJECT level's timeout; a DELAY level's request past its timeout goes
        behind the level's others."""
        for level in self._order:
            kept: collections.deque[_Entry] = collections.deque()
            for entry in level.queue:
                if self._dropped_locked(entry, now):
                    continue
                if entry.expires and now > entry.expires:
                    if level.delays:
                        level.delayed.append(entry)
                    elif entry.call.withdraw(UnavailableError(TIMEOUT_MESSAGE)):
                        self._rejected += 1
                        self._queued -= 1
                        self._queued_rows -= entry.size
                    else:
                        kept.append(entry)
                else:
                    kept.append(entry)
            level.queue = kept
            level.delayed = collections.deque(
                entry for entry in level.delayed if not self._dropped_locked(entry, now)
            )

    def _dropped_locked(self, entry: _Entry, now: float) -> bool:
        """Whether ``entry``'s call was answered already; if so its call is released and its
        place given back."""
        if not entry.call.settled:
            return False
        entry.call.start(now)  # (answered: it only releases the call)
        self._queued -= 1
        self._queued_rows -= entry.size
        return True

    def _process(self, batch: list[_Entry]) -> int:
        started = perf_counter_ns()
        now = monotonic()
        live = [entry.call for entry in batch if entry.call.start(now)]
        if not live:
            return 0
        size = sum(call.size for call in live)
        infer_started = perf_counter_ns()
        try:
            with callers_scope(live):
                outcomes = self._executor.execute_requests([call.pending for call in live])
        except BaseException as error:  # noqa: BLE001 - a failing batch fails its requests
            failure = ServingError.wrap(error, f"The batch of model {self._name} failed")
            outcomes = [failure for _ in live]
        finally:
            infer_ended = perf_counter_ns()
            for index, call in enumerate(live):
                call.mark(started, infer_started, infer_ended, size, leads=index == 0)
        settle_all(live, outcomes)
        return size


def request_batching(
    executor: RequestExecutor, config: TritonModelConfig, version: int, threads: int = 1
) -> RequestBatching | None:
    """The placement of a model whose ``config`` sets ``dynamic_batching``; None if it does
    not (or ``max_batch_size`` is 0: Triton then runs each request alone).  ``threads``:
    batches run at once (one per instance of the model).  Raises what
    :func:`~.batch_queue_policy.dynamic_batching` raises."""
    options = dynamic_batching(config)
    if options is None:
        return None
    return RequestBatching(
        executor,
        options,
        name=f"{config.message.name}/{version}",
        threads=threads,
        optional_inputs=any(tensor.optional for tensor in config.message.input),
    )
