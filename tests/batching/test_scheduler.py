"""SharedBatchScheduler: batch formation, timeouts, bounded queues, splitting, fairness, faults."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Self

import pytest

from servinglib.batching.options import BatchingParameters
from servinglib.batching.scheduler import BatchQueue, BatchRecord, SharedBatchScheduler
from servinglib.errors import InvalidArgumentError, ServingError, StatusCode, UnavailableError
from servinglib.testing import FakeClock, wait_until


class Task:
    """A task of ``size`` rows that records how it ended."""

    def __init__(self, size: int, label: str = "", parent: Task | None = None) -> None:
        self.size = size
        self.label = label
        self.parent = parent
        self.error: ServingError | None = None

    def split(self, size: int) -> tuple[Self, Self]:
        return type(self)(size, self.label, self), type(self)(self.size - size, self.label, self)

    def fail(self, error: ServingError) -> None:
        self.error = error


class Recorder:
    """A process function recording each batch's labels and sizes; can be held at a gate."""

    def __init__(self) -> None:
        self.batches: list[list[Task]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()
        self.lock = threading.Lock()

    def __call__(self, tasks: list[Task]) -> int:
        self.entered.set()
        self.gate.wait(30)
        with self.lock:
            self.batches.append(tasks)
        return sum(t.size for t in tasks)

    def sizes(self) -> list[int]:
        with self.lock:
            return [sum(t.size for t in batch) for batch in self.batches]

    def count(self) -> int:
        with self.lock:
            return len(self.batches)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def scheduler(clock: FakeClock) -> Iterator[SharedBatchScheduler]:
    scheduler = SharedBatchScheduler(1, clock=clock)
    yield scheduler
    scheduler.close()


def params(**kwargs: object) -> BatchingParameters:
    return BatchingParameters(**kwargs)  # type: ignore[arg-type]


def test_a_full_batch_runs_at_once(scheduler: SharedBatchScheduler) -> None:
    """A batch that reaches max_batch_size runs without waiting for its timeout."""
    recorder = Recorder()
    queue = scheduler.add_queue("q", params(max_batch_size=4, batch_timeout_s=60), recorder)
    for _ in range(4):
        queue.schedule(Task(1))
    wait_until(lambda: recorder.count() == 1)
    assert recorder.sizes() == [4]


def test_an_under_full_batch_waits_for_its_timeout(
    scheduler: SharedBatchScheduler, clock: FakeClock
) -> None:
    """An under-full batch runs only once batch_timeout_s has passed since its first task."""
    recorder = Recorder()
    queue = scheduler.add_queue("q", params(max_batch_size=8, batch_timeout_s=0.01), recorder)
    queue.schedule(Task(2))
    queue.schedule(Task(3))
    assert queue.statistics().queued_tasks == 2  # fake time stands still: it cannot be ready
    clock.advance(0.01)
    wait_until(lambda: recorder.count() == 1)
    assert recorder.sizes() == [5]


def test_timeout_zero_runs_when_a_thread_is_free(scheduler: SharedBatchScheduler) -> None:
    """With batch_timeout_s 0 a lone task runs as soon as a batch thread is idle."""
    recorder = Recorder()
    queue = scheduler.add_queue("q", params(max_batch_size=8), recorder)
    queue.schedule(Task(1))
    wait_until(lambda: recorder.count() == 1)


def test_tasks_that_do_not_fit_start_a_new_batch(scheduler: SharedBatchScheduler) -> None:
    """Without splitting, a task that would overflow the open batch closes it and opens another."""
    recorder = Recorder()
    recorder.gate.clear()
    blocker = scheduler.add_queue("blocker", params(max_batch_size=1), recorder)
    blocker.schedule(Task(1))
    recorder.entered.wait(10)
    queue = scheduler.add_queue("q", params(max_batch_size=4, batch_timeout_s=60), recorder)
    for size in (3, 2, 2):
        queue.schedule(Task(size))
    assert queue.statistics().queued_batches == 2
    recorder.gate.set()
    wait_until(lambda: recorder.count() == 3)
    assert recorder.sizes() == [1, 3, 4]


def test_a_full_queue_refuses_at_once(scheduler: SharedBatchScheduler) -> None:
    """Beyond max_enqueued_batches waiting batches, schedule() raises UNAVAILABLE saying so."""
    recorder = Recorder()
    recorder.gate.clear()
    queue = scheduler.add_queue("q", params(max_batch_size=1, max_enqueued_batches=2), recorder)
    queue.schedule(Task(1))
    recorder.entered.wait(10)  # the only thread is busy with the first batch
    queue.schedule(Task(1))
    queue.schedule(Task(1))
    with pytest.raises(UnavailableError, match="batch queue q is full") as caught:
        queue.schedule(Task(1))
    assert caught.value.code is StatusCode.UNAVAILABLE
    assert queue.statistics().rejected_tasks == 1
    recorder.gate.set()
    wait_until(lambda: recorder.count() == 3)


def test_a_task_larger_than_the_maximum_is_invalid(scheduler: SharedBatchScheduler) -> None:
    """A request with more rows than max_batch_size is INVALID_ARGUMENT, naming both sizes."""
    queue = scheduler.add_queue("q", params(max_batch_size=4), Recorder())
    with pytest.raises(InvalidArgumentError, match="5 rows is larger than the maximum batch size"):
        queue.schedule(Task(5))


def test_large_batch_splitting_fills_batches(
    scheduler: SharedBatchScheduler, clock: FakeClock
) -> None:
    """With splitting, a task fills the open batch and spills into new execution-sized ones."""
    recorder = Recorder()
    options = params(
        max_batch_size=10,
        max_execution_batch_size=4,
        enable_large_batch_splitting=True,
        batch_timeout_s=60,
    )
    queue = scheduler.add_queue("q", options, recorder)
    queue.schedule(Task(1, "a"))
    queue.schedule(Task(10, "b"))
    wait_until(lambda: recorder.count() == 2)
    clock.advance(60)
    wait_until(lambda: recorder.count() == 3)
    assert recorder.sizes() == [4, 4, 3]
    labels = [[t.label for t in batch] for batch in recorder.batches]
    assert labels == [["a", "b"], ["b"], ["b"]]


def test_splitting_refuses_what_the_free_batches_cannot_hold(
    scheduler: SharedBatchScheduler,
) -> None:
    """With splitting, a task is refused whole if the queue's free room is smaller than it."""
    recorder = Recorder()
    recorder.gate.clear()
    options = params(
        max_batch_size=8,
        max_execution_batch_size=2,
        enable_large_batch_splitting=True,
        max_enqueued_batches=2,
    )
    queue = scheduler.add_queue("q", options, recorder)
    queue.schedule(Task(1))
    recorder.entered.wait(10)
    with pytest.raises(UnavailableError, match="full"):
        queue.schedule(Task(5))
    queue.schedule(Task(4))
    recorder.gate.set()
    wait_until(lambda: recorder.count() == 3)


def test_threads_serve_queues_round_robin(scheduler: SharedBatchScheduler) -> None:
    """With ready batches in two queues, one thread alternates between them."""
    recorder = Recorder()
    recorder.gate.clear()
    blocker = scheduler.add_queue("blocker", params(max_batch_size=1), recorder)
    blocker.schedule(Task(1, "-"))
    recorder.entered.wait(10)
    a = scheduler.add_queue("a", params(max_batch_size=1), recorder)
    b = scheduler.add_queue("b", params(max_batch_size=1), recorder)
    for _ in range(3):
        a.schedule(Task(1, "a"))
    for _ in range(3):
        b.schedule(Task(1, "b"))
    recorder.gate.set()
    wait_until(lambda: recorder.count() == 7)
    order = "".join(batch[0].label for batch in recorder.batches[1:])
    assert order in {"ababab", "bababa"}


def test_a_failing_batch_fails_its_tasks_only(scheduler: SharedBatchScheduler) -> None:
    """A process function that raises (even BaseException) fails that batch; the next one runs."""
    calls: list[int] = []

    def process(tasks: list[Task]) -> int:
        calls.append(len(tasks))
        if len(calls) == 1:
            raise SystemExit("the model thread died")
        return 1

    queue = scheduler.add_queue("q", params(max_batch_size=1), process)
    first, second = Task(1), Task(1)
    queue.schedule(first)
    wait_until(lambda: first.error is not None)
    assert "the model thread died" in str(first.error)
    queue.schedule(second)
    wait_until(lambda: len(calls) == 2)
    assert second.error is None


def test_closing_a_queue_runs_what_is_queued_then_refuses(
    scheduler: SharedBatchScheduler,
) -> None:
    """close() runs the waiting batches at once, waits for them, then refuses new tasks."""
    recorder = Recorder()
    queue = scheduler.add_queue("q", params(max_batch_size=8, batch_timeout_s=60), recorder)
    queue.schedule(Task(2))
    queue.close(timeout_s=10)
    assert recorder.sizes() == [2]
    assert "q" not in scheduler.statistics()
    with pytest.raises(UnavailableError, match="closed"):
        queue.schedule(Task(1))


def test_closing_a_queue_waits_by_the_schedulers_clock(
    scheduler: SharedBatchScheduler, clock: FakeClock
) -> None:
    """close(timeout_s) gives up on a batch still running once the scheduler's clock says so."""
    started, release = threading.Event(), threading.Event()

    def slow(tasks: list[Task]) -> int:
        started.set()
        assert release.wait(30)
        return sum(task.size for task in tasks)

    queue = scheduler.add_queue("q", params(max_batch_size=1), slow)
    queue.schedule(Task(1))
    assert started.wait(30)
    closer = threading.Thread(target=queue.close, kwargs={"timeout_s": 5.0})
    closer.start()
    wait_until(lambda: clock.pending_timers > 0)  # the close waits on the fake clock
    clock.advance(5.0)
    closer.join(30)
    assert not closer.is_alive()  # gave up: the batch still runs
    release.set()


def test_closing_the_scheduler_fails_what_is_queued(clock: FakeClock) -> None:
    """Scheduler close() fails every queued task with UNAVAILABLE and stops its threads."""
    scheduler = SharedBatchScheduler(2, clock=clock)
    queue: BatchQueue[Task] = scheduler.add_queue(
        "q", params(max_batch_size=8, batch_timeout_s=60), Recorder()
    )
    task = Task(1)
    queue.schedule(task)
    scheduler.close()
    assert isinstance(task.error, UnavailableError)
    with pytest.raises(UnavailableError):
        scheduler.add_queue("other", params(), Recorder())


def test_statistics_and_observers(scheduler: SharedBatchScheduler) -> None:
    """Each batch is counted and reported to observers; a broken observer is harmless."""
    records: list[BatchRecord] = []

    def broken(_record: BatchRecord) -> None:
        raise RuntimeError("observer bug")

    scheduler.add_observer(broken)
    scheduler.add_observer(records.append)

    def process(tasks: list[Task]) -> int:
        return 4  # padded from 3 rows to 4

    queue = scheduler.add_queue(
        "q", params(max_batch_size=4, allowed_batch_sizes=[2, 4], batch_timeout_s=0), process
    )
    queue.schedule(Task(3))
    wait_until(lambda: len(records) == 1)
    record = records[0]
    assert (record.queue, record.size, record.padded_size, record.tasks) == ("q", 3, 4, 1)
    assert len(record.queueing_latencies_s) == 1
    stats = queue.statistics()
    assert (stats.batches_run, stats.rows_run, stats.padding_rows) == (1, 3, 1)
    assert stats.mean_batch_size == 3.0


def test_a_batch_at_a_preferred_size_runs_before_its_timeout(
    scheduler: SharedBatchScheduler, clock: FakeClock
) -> None:
    """A waiting batch whose rows reach a preferred size runs at once; the rest waits its delay."""
    recorder = Recorder()
    queue = scheduler.add_queue(
        "q", params(max_batch_size=8, batch_timeout_s=60, preferred_batch_sizes=[3]), recorder
    )
    for size in (1, 2):
        queue.schedule(Task(size))
    wait_until(lambda: recorder.count() == 1)
    queue.schedule(Task(1))
    assert queue.statistics().queued_tasks == 1  # 1 row is no preferred size: it waits
    clock.advance(60)
    wait_until(lambda: recorder.count() == 2)
    assert recorder.sizes() == [3, 1]


def test_a_busy_thread_takes_the_largest_preferred_first_part(
    scheduler: SharedBatchScheduler,
) -> None:
    """Tasks gathered while the thread is busy run as their largest preferred first part."""
    recorder = Recorder()
    recorder.gate.clear()
    blocker = scheduler.add_queue("blocker", params(max_batch_size=1), recorder)
    blocker.schedule(Task(1))
    recorder.entered.wait(10)
    queue = scheduler.add_queue(
        "q", params(max_batch_size=8, batch_timeout_s=60, preferred_batch_sizes=[2, 4]), recorder
    )
    for _ in range(5):
        queue.schedule(Task(1))
    recorder.gate.set()
    wait_until(lambda: recorder.count() == 2)
    assert recorder.sizes() == [1, 4]
    assert queue.statistics().queued_tasks == 1


def test_preferred_sizes_beyond_the_largest_batch_are_invalid() -> None:
    """A preferred batch size larger than max_batch_size is refused, as Triton refuses it."""
    with pytest.raises(InvalidArgumentError, match="preferred batch sizes"):
        params(max_batch_size=4, preferred_batch_sizes=[8])
