"""A call waiting in a placement's queue until the model runs it with others.

The queueing placements of Triton models (:mod:`~servinglib.loaders.triton.request_batching`,
:mod:`~servinglib.loaders.triton.sequence_batcher`) keep each call as a :class:`QueuedCall`:
its future, its deadline checked when its batch starts, its stages marked, and its
``release`` called exactly once, as :class:`~servinglib.servable.Placement` requires.
"""

from __future__ import annotations

import concurrent.futures
import threading
from time import perf_counter_ns
from typing import Any, Self, final

import numpy.typing as npt

from servinglib.errors import DeadlineExceededError, ServingError
from servinglib.servable import ModelCall

Outputs = dict[str, npt.NDArray[Any]]


@final
class QueuedCall:
    """One call waiting in a queue of a placement of its own: its request record (what the
    model's executor made of it), its rows, and the future its caller waits on.

    :meth:`start` hands it to the model (or settles it: deadline passed, caller gone),
    :meth:`settle` / :meth:`fail` answer it; each releases the call once.  Thread-safe.
    """

    __slots__ = ("_call", "_lock", "_released", "future", "pending", "size")

    def __init__(self, call: ModelCall, pending: Any, size: int) -> None:  # noqa: ANN401 - the placement's own request record
        self._call = call
        self.pending = pending
        self.size = size
        self.future: concurrent.futures.Future[Outputs] = concurrent.futures.Future()
        self._lock = threading.Lock()
        self._released = False  # guarded by: _lock

    @property
    def call(self) -> ModelCall:
        """The call queued."""
        return self._call

    def split(self, size: int) -> tuple[Self, Self]:
        raise AssertionError("a request handed to execute() whole is never split")

    def start(self, now: float) -> bool:
        """Whether the batch hands this request to the model; settles it if not."""
        deadline = self._call.deadline
        if deadline is not None and now >= deadline:
            self.fail(DeadlineExceededError("Deadline exceeded while waiting in the batch queue"))
            return False
        if not self.future.set_running_or_notify_cancel():  # its caller gave up
            self._release()
            return False
        return True

    def mark(
        self, started: int, infer_started: int, infer_ended: int, size: int, *, leads: bool
    ) -> None:
        stages = self._call.stages
        stages.started_ns = started
        stages.infer_started_ns = infer_started
        stages.infer_ended_ns = infer_ended
        stages.ended_ns = perf_counter_ns()
        stages.batch_size = size
        stages.leads_batch = leads

    def settle(self, outcome: Outputs | ServingError) -> None:
        if not self.future.done():
            if isinstance(outcome, ServingError):
                self.future.set_exception(outcome)
            else:
                self.future.set_result(outcome)
        self._release()

    def fail(self, error: ServingError) -> None:
        """Settles the request with ``error`` (a queue closing, a batch failing, its deadline)."""
        future = self.future
        if not future.done() and (future.running() or future.set_running_or_notify_cancel()):
            future.set_exception(error)
        self._release()

    def _release(self) -> None:
        with self._lock:
            if self._released:
                return
            self._released = True
        self._call.release()
