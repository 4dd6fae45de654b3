"""SharedBatchScheduler: bounded batch queues served fairly by one pool of batch threads."""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Callable
from typing import Any, Generic, Protocol, Self, TypeVar, final

import attrs

from servinglib.batching.options import BatchingParameters
from servinglib.core.clock import Clock, SystemClock
from servinglib.errors import InvalidArgumentError, ServingError, UnavailableError

_log = logging.getLogger(__name__)


class BatchTask(Protocol):
    """What a batch queue schedules: a number of rows that can be split and failed."""

    @property
    def size(self) -> int:
        """Rows (dimension 0) of this task."""

    def split(self, size: int) -> tuple[Self, Self]:
        """This task as its first ``size`` rows and the rest (0 < size < self.size)."""

    def fail(self, error: ServingError) -> None:
        """Completes the task's request with ``error`` (idempotent)."""


T = TypeVar("T", bound=BatchTask)


@final
@attrs.frozen
class BatchRecord:
    """What one batch was: for statistics and metrics hooks.  Immutable.

    ``size``: rows of the tasks; ``padded_size``: rows the model ran
    (with padding); ``queueing_latencies_s``: each task's wait from
    schedule() until its batch started; ``processing_s``: the batch's run.
    """

    queue: str
    thread_pool_name: str
    size: int
    padded_size: int
    tasks: int
    queueing_latencies_s: tuple[float, ...]
    processing_s: float


@final
@attrs.frozen
class QueueStatistics:
    """A queue's depth now and its totals so far.  Immutable snapshot."""

    queue: str
    queued_tasks: int
    queued_batches: int
    running_batches: int
    batches_run: int
    tasks_run: int
    rows_run: int
    padding_rows: int
    rejected_tasks: int

    @property
    def mean_batch_size(self) -> float:
        """Mean rows per batch run (padding excluded); 0 before the first batch."""
        return self.rows_run / self.batches_run if self.batches_run else 0.0


ProcessBatch = Callable[[list[T]], int]
"""``process(tasks)`` runs a batch on a batch thread and returns the rows it ran (padding
included); it completes every task, and raising fails the tasks it left incomplete."""

BatchObserver = Callable[[BatchRecord], None]


@final
class SharedBatchScheduler:
    """One pool of batch threads shared, round-robin, by any number of batch queues.

    Queues come and go as servable versions load and unload
    (:meth:`add_queue`, :meth:`BatchQueue.close`).  :meth:`close` fails
    what is still queued and stops the threads.
    Thread-safe.
    """

    def __init__(
        self,
        num_batch_threads: int | None = None,
        *,
        thread_pool_name: str = "batch_threads",
        clock: Clock | None = None,
    ) -> None:
        threads = (
            num_batch_threads
            if num_batch_threads is not None
            else BatchingParameters().num_batch_threads
        )
        if threads < 1:
            raise InvalidArgumentError(f"num_batch_threads must be at least 1, got {threads}")
        self.thread_pool_name = thread_pool_name
        self._clock = clock if clock is not None else SystemClock()
        self._cond = threading.Condition(threading.Lock())
        self._queues: list[_QueueState[Any]] = []  # guarded by: _cond
        self._cursor = 0  # guarded by: _cond; the queue round-robin looks at first
        self._observers: list[BatchObserver] = []  # replaced whole
        self._stopping = False  # guarded by: _cond
        self._threads = [
            threading.Thread(target=self._run, name=f"{thread_pool_name}-{i}", daemon=True)
            for i in range(threads)
        ]
        for thread in self._threads:
            thread.start()

    @property
    def num_batch_threads(self) -> int:
        """The size of the pool."""
        return len(self._threads)

    def add_queue(
        self, name: str, options: BatchingParameters, process: ProcessBatch[T]
    ) -> BatchQueue[T]:
        """A new queue named ``name`` whose batches ``process`` runs on this pool."""
        state: _QueueState[T] = _QueueState(
            name,
            options,
            process,
            _SchedulerLink(
                self._clock, self._cond, self.thread_pool_name, self._observe, self._remove_locked
            ),
        )
        with self._cond:
            if self._stopping:
                raise UnavailableError("The batch scheduler is closed")
            self._queues.append(state)
        return BatchQueue(state)

    def add_observer(self, observer: BatchObserver) -> None:
        """Calls ``observer(record)`` on the batch thread after every batch (metrics hooks).

        Important: observers must be quick and must not raise (errors are logged).
        """
        self._observers = [*self._observers, observer]

    def statistics(self) -> dict[str, QueueStatistics]:
        """Every open queue's statistics, by queue name."""
        with self._cond:
            return {queue.name: queue.statistics_locked() for queue in self._queues}

    def close(self) -> None:
        """Fails every queued task with UNAVAILABLE and stops the threads after their batches."""
        with self._cond:
            self._stopping = True
            queues, self._queues = self._queues, []
            dropped = [task for queue in queues for task in queue.drain_locked()]
            self._cond.notify_all()
        for task in dropped:
            task.fail(UnavailableError("The batch scheduler is shutting down"))
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join()

    # -- batch threads -------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                picked = self._next_batch_locked()
                if picked is None:
                    return
            queue, batch = picked
            queue.run(batch)
            with self._cond:
                queue.finished_locked()
                self._cond.notify_all()

    def _next_batch_locked(self) -> tuple[_QueueState[Any], _Batch[Any]] | None:
        while not self._stopping:
            now = self._clock.now()
            wake_at: float | None = None
            count = len(self._queues)
            for step in range(count):
                index = (self._cursor + step) % count
                queue = self._queues[index]
                batch, ready_at = queue.take_locked(now)
                if batch is not None:
                    self._cursor = index + 1
                    return queue, batch
                if ready_at is not None and (wake_at is None or ready_at < wake_at):
                    wake_at = ready_at
            if wake_at is None:
                self._cond.wait()
            else:
                self._clock.wait(self._cond, wake_at - now)
        return None

    def _remove_locked(self, queue: _QueueState[Any]) -> None:
        if queue in self._queues:
            index = self._queues.index(queue)
            del self._queues[index]
            if self._cursor > index:
                self._cursor -= 1
        self._cond.notify_all()

    def _observe(self, record: BatchRecord) -> None:
        for observer in self._observers:
            try:
                observer(record)
            except Exception:  # noqa: BLE001 - a broken metrics hook must not stop batching
                _log.exception("A batch observer failed")


@final
class _Entry(Generic[T]):
    __slots__ = ("enqueued_at", "task")

    def __init__(self, task: T, enqueued_at: float) -> None:
        self.task = task
        self.enqueued_at = enqueued_at


@final
class _Batch(Generic[T]):
    __slots__ = ("closed", "entries", "opened_at", "size")

    def __init__(self, opened_at: float) -> None:
        self.entries: list[_Entry[T]] = []
        self.size = 0
        self.opened_at = opened_at
        self.closed = False

    def add(self, task: T, now: float) -> None:
        self.entries.append(_Entry(task, now))
        self.size += task.size


@final
class BatchQueue(Generic[T]):
    """One servable signature's queue of batches on a SharedBatchScheduler (:meth:`add_queue`).

    Thread-safe.
    """

    def __init__(self, state: _QueueState[T]) -> None:
        self._state = state

    @property
    def name(self) -> str:
        """The queue's name (model, version and signature)."""
        return self._state.name

    @property
    def options(self) -> BatchingParameters:
        """The queue's batching parameters."""
        return self._state.options

    def schedule(self, task: T) -> None:
        """Enqueues ``task``; its request completes when its batch (or batches) ran.

        Raises InvalidArgumentError for a task larger than ``max_batch_size``
        and UnavailableError, at once, when the queue is full or closed.
        """
        self._state.schedule(task)

    def statistics(self) -> QueueStatistics:
        """Depth now and totals so far."""
        with self._state.cond:
            return self._state.statistics_locked()

    def close(self, *, timeout_s: float | None = None) -> None:
        """Refuses new tasks, lets the queued batches run at once, and waits until they ran.

        ``timeout_s`` bounds the wait (None: until done).
        """
        self._state.close(timeout_s)


@final
@attrs.frozen
class _SchedulerLink:
    """What a queue uses of its scheduler: its clock, its lock, and two of its methods."""

    clock: Clock
    cond: threading.Condition  # one lock for the scheduler and all its queues
    thread_pool_name: str
    observe: Callable[[BatchRecord], None]  # reports a batch that ran to the observers
    remove_locked: Callable[[_QueueState[Any]], None]  # drops a closed queue; holds cond


@final
@attrs.define
class _Totals:
    """A queue's counters since it opened.  Guarded by the scheduler's lock."""

    batches: int = 0
    tasks: int = 0
    rows: int = 0
    padding: int = 0
    rejected: int = 0


@final
class _QueueState(Generic[T]):
    """A queue's batches and counters; the scheduler's threads work on it under its lock."""

    def __init__(
        self,
        name: str,
        options: BatchingParameters,
        process: ProcessBatch[T],
        scheduler: _SchedulerLink,
    ) -> None:
        self.name = name
        self.options = options
        self._scheduler = scheduler
        self._process = process
        self._clock = scheduler.clock
        self.cond = scheduler.cond
        self._batches: collections.deque[_Batch[T]] = collections.deque()  # guarded by: cond
        self._closing = False  # guarded by: cond
        self._running = 0  # guarded by: cond
        self._totals = _Totals()  # guarded by: cond

    def schedule(self, task: T) -> None:
        size = task.size
        options = self.options
        if size > options.max_batch_size:
            raise InvalidArgumentError(
                f"A request of {size} rows is larger than the maximum batch size "
                f"({options.max_batch_size}) of batch queue {self.name}"
            )
        with self.cond:
            if self._closing:
                raise UnavailableError(
                    f"Batch queue {self.name} is closed: its version is unloading"
                )
            now = self._clock.now()
            batches = len(self._batches)
            if options.enable_large_batch_splitting:
                self._enqueue_split_locked(task, size, now)
            else:
                self._enqueue_whole_locked(task, size, now)
            # Wake a batch thread only when there is something new for it: a batch that is
            # ready (full, or timeout 0) or a new batch whose timeout it must wait for.
            # Waking it for every task costs a GIL handoff per request.
            if (
                options.batch_timeout_s == 0
                or len(self._batches) != batches
                or self._batches[-1].closed
                or self._batches[-1].size in options.preferred_batch_sizes
            ):
                self.cond.notify()

    def _open_batch_locked(self) -> _Batch[T] | None:
        if self._batches and not self._batches[-1].closed:
            return self._batches[-1]
        return None

    def _new_batch_locked(self, now: float) -> _Batch[T]:
        batch: _Batch[T] = _Batch(now)
        self._batches.append(batch)
        return batch

    def _reject_locked(self) -> UnavailableError:
        self._totals.rejected += 1
        return UnavailableError(
            f"The batch queue {self.name} is full ({self.options.max_enqueued_batches} batches "
            "waiting); retry later"
        )

    def _enqueue_whole_locked(self, task: T, size: int, now: float) -> None:
        limit = self.options.execution_batch_size
        batch = self._open_batch_locked()
        if batch is None or batch.size + size > limit:
            if len(self._batches) >= self.options.max_enqueued_batches:
                raise self._reject_locked()
            if batch is not None:
                batch.closed = True
            batch = self._new_batch_locked(now)
        batch.add(task, now)
        if batch.size >= limit:
            batch.closed = True

    def _enqueue_split_locked(self, task: T, size: int, now: float) -> None:
        limit = self.options.execution_batch_size
        batch = self._open_batch_locked()
        room = limit - batch.size if batch is not None else 0
        free = self.options.max_enqueued_batches - len(self._batches)
        if size > room + free * limit:
            raise self._reject_locked()
        rest: T | None = task
        while rest is not None:
            if batch is None or batch.size >= limit:
                if batch is not None:
                    batch.closed = True
                batch = self._new_batch_locked(now)
            room = limit - batch.size
            piece = rest
            if rest.size > room:
                piece, rest = rest.split(room)
            else:
                rest = None
            batch.add(piece, now)
        if batch is not None and batch.size >= limit:
            batch.closed = True

    def take_locked(self, now: float) -> tuple[_Batch[T] | None, float | None]:
        """The next batch if it is ready (else None), and when the waiting one will be."""
        if not self._batches:
            return None, None
        batch = self._batches[0]
        ready_at = batch.opened_at + self.options.batch_timeout_s
        if batch.closed or self._closing or now >= ready_at:
            self._batches.popleft()
            batch.closed = True
            self._running += 1
            return batch, None
        preferred = self._preferred_part_locked(batch)
        if preferred is None:
            return None, ready_at
        self._running += 1
        return preferred, None

    def _preferred_part_locked(self, batch: _Batch[T]) -> _Batch[T] | None:
        """The largest first part of ``batch`` whose size is a preferred batch size, taken out
        of it (the rest waits on, its delay counted from its oldest task); None if none."""
        preferred = self.options.preferred_batch_sizes
        if not preferred:
            return None
        total, count = 0, 0
        for index, entry in enumerate(batch.entries):
            total += entry.task.size
            if total in preferred:
                count = index + 1
        if not count:
            return None
        if count == len(batch.entries):
            self._batches.popleft()
            batch.closed = True
            return batch
        part: _Batch[T] = _Batch(batch.opened_at)
        for entry in batch.entries[:count]:
            part.add(entry.task, entry.enqueued_at)
        part.closed = True
        batch.entries = batch.entries[count:]
        batch.size -= part.size
        batch.opened_at = batch.entries[0].enqueued_at
        return part

    def run(self, batch: _Batch[T]) -> None:
        """Runs ``batch`` on the calling (batch) thread; never raises."""
        started = self._clock.now()
        tasks = [entry.task for entry in batch.entries]
        padded = batch.size
        try:
            padded = self._process(tasks)
        except BaseException as error:  # noqa: BLE001 - a failing batch must not kill the thread
            wrapped = (
                error
                if isinstance(error, ServingError)
                else ServingError.wrap(error, f"Batch of queue {self.name} failed")
            )
            _log.warning("Batch of queue %s failed: %s", self.name, wrapped)
            for task in tasks:
                task.fail(wrapped)
        ended = self._clock.now()
        record = BatchRecord(
            self.name,
            self._scheduler.thread_pool_name,
            batch.size,
            padded,
            len(tasks),
            tuple(started - entry.enqueued_at for entry in batch.entries),
            ended - started,
        )
        with self.cond:
            totals = self._totals
            totals.batches += 1
            totals.tasks += len(tasks)
            totals.rows += batch.size
            totals.padding += max(0, padded - batch.size)
        self._scheduler.observe(record)

    def finished_locked(self) -> None:
        self._running -= 1
        if self._closing and not self._batches and self._running == 0:
            self._scheduler.remove_locked(self)

    def drain_locked(self) -> list[T]:
        self._closing = True
        tasks = [entry.task for batch in self._batches for entry in batch.entries]
        self._batches.clear()
        return tasks

    def statistics_locked(self) -> QueueStatistics:
        totals = self._totals
        return QueueStatistics(
            self.name,
            sum(len(batch.entries) for batch in self._batches),
            len(self._batches),
            self._running,
            totals.batches,
            totals.tasks,
            totals.rows,
            totals.padding,
            totals.rejected,
        )

    def close(self, timeout_s: float | None) -> None:
        clock = self._clock
        deadline = None if timeout_s is None else clock.now() + timeout_s
        with self.cond:
            self._closing = True
            for batch in self._batches:
                batch.closed = True
            if not self._batches and self._running == 0:
                self._scheduler.remove_locked(self)
                return
            self.cond.notify_all()
            while self._batches or self._running:
                if deadline is None:
                    self.cond.wait()
                    continue
                remaining = deadline - clock.now()
                if remaining <= 0:
                    return
                clock.wait(self.cond, remaining)
