"""A call waiting in a placement's queue until the model runs it with others.

The queueing placements of Triton models (:mod:`~servinglib.loaders.triton.request_batching`,
:mod:`~servinglib.loaders.triton.sequence_batcher`) keep each call as a :class:`QueuedCall`:
its future, its deadline checked when its batch starts, its stages marked, and its
``release`` called exactly once, as :class:`~servinglib.servable.Placement` requires.

A call made from an event loop waits on a future of that loop, not on a thread's: the batch's
thread answers all of a batch's calls waiting on one loop with one hand-over
(:func:`settle_all`), where a thread's future would take one wake-up of the loop per call.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import Sequence
from time import perf_counter_ns
from typing import Any, Self, final

import numpy.typing as npt

from servinglib.errors import DeadlineExceededError, ServingError
from servinglib.model_calls import caller_scope, current_caller
from servinglib.servable import ModelCall, answer_within

Outputs = dict[str, npt.NDArray[Any]]
Outcome = Outputs | BaseException  # a model's own exception too (the DataPlane logs it)


@final
class QueuedCall:
    """One call waiting in a queue of a placement of its own: its request record (what the
    model's executor made of it), its rows, and what its caller waits on: ``future`` (a
    thread's), or, made with ``loop``, :meth:`answer` on that event loop.

    :meth:`start` hands it to the model (or settles it: deadline passed, caller gone),
    :meth:`settle` / :meth:`fail` (and :func:`settle_all`) answer it; each releases the call
    once.  Thread-safe.
    """

    __slots__ = (
        "_call",
        "_caller",
        "_future",
        "_lock",
        "_loop",
        "_released",
        "_taken",
        "_waiter",
        "pending",
        "size",
    )

    def __init__(
        self,
        call: ModelCall,
        pending: Any,  # noqa: ANN401 - the placement's own request record
        size: int,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self._call = call
        self._caller = current_caller()  # what a model calls other models through (BLS)
        self.pending = pending
        self.size = size
        self._loop = loop
        self._waiter: asyncio.Future[Outputs] | None = None
        self._future: concurrent.futures.Future[Outputs] | None = None
        if loop is None:
            self._future = concurrent.futures.Future()
        else:
            self._waiter = loop.create_future()
        self._lock = threading.Lock()
        self._released = False  # guarded by: _lock
        self._taken = False  # guarded by: _lock; started, or withdrawn from its queue

    @property
    def call(self) -> ModelCall:
        """The call queued."""
        return self._call

    @property
    def future(self) -> concurrent.futures.Future[Outputs]:
        """What a call made without a loop waits on."""
        assert self._future is not None, "a call made on a loop is answered by answer()"
        return self._future

    async def answer(self) -> Outputs:
        """Its outputs, awaited on the loop it was made with: DeadlineExceededError once the
        call's deadline passes first; cancelling the wait tells the queue the caller left."""
        waiter = self._waiter
        assert waiter is not None, "a call made without a loop is answered on its future"
        return await answer_within(waiter, self._call.deadline)

    def split(self, size: int) -> tuple[Self, Self]:
        raise AssertionError("a request handed to execute() whole is never split")

    def start(self, now: float) -> bool:
        """Whether the batch hands this request to the model; settles it if not."""
        with self._lock:
            if self._taken:  # withdrawn (and settled) already
                return False
            self._taken = True
        deadline = self._call.deadline
        if deadline is not None and now >= deadline:
            self.fail(DeadlineExceededError("Deadline exceeded while waiting in the batch queue"))
            return False
        if self._waiter is not None:
            # Read from this thread, a racy but harmless look: a caller that leaves just
            # after it gets an answer nobody reads.
            if self._waiter.done():  # its caller gave up, or its deadline passed
                self._release()
                return False
            return True
        if not self.future.set_running_or_notify_cancel():  # its caller gave up
            self._release()
            return False
        return True

    def withdraw(self, error: ServingError) -> bool:
        """Fails the call with ``error`` unless a batch has started it (True: it had not, and
        never will be); a queue's timeout, say."""
        with self._lock:
            if self._taken:
                return False
            self._taken = True
        self.fail(error)
        return True

    @property
    def settled(self) -> bool:
        """Whether its caller has an answer, or has gone (a racy look, from any thread)."""
        waiter = self._waiter if self._waiter is not None else self._future
        assert waiter is not None
        return waiter.done()

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
        stages.rows = self.size

    def settle(self, outcome: Outcome) -> None:
        if self._loop is not None:
            _hand_over(self._loop, [(self._waiter, outcome)])
        elif not self.future.done():
            if isinstance(outcome, BaseException):
                self.future.set_exception(outcome)
            else:
                self.future.set_result(outcome)
        self._release()

    def fail(self, error: ServingError) -> None:
        """Settles the request with ``error`` (a queue closing, a batch failing, its deadline)."""
        if self._loop is not None:
            _hand_over(self._loop, [(self._waiter, error)])
            self._release()
            return
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


def callers_scope(calls: Sequence[QueuedCall]) -> contextlib.AbstractContextManager[None]:
    """Where a batch of ``calls`` runs on a thread of the placement's: inside the model caller
    of the server that queued them (its first call's), so that the model may call other
    models (BLS) as it may from a request's own thread; the calls' deadlines are not the
    batch's (a BLS request has its own timeout, as in Triton)."""
    caller = calls[0]._caller if calls else None  # noqa: SLF001 - the module's own class
    return contextlib.nullcontext() if caller is None else caller_scope(caller)


def settle_all(calls: Sequence[QueuedCall], outcomes: Sequence[Outcome]) -> None:
    """Settles each of ``calls`` with its outcome (and releases it), handing the answers of
    the calls made on one event loop over to it at once."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[Any, Outcome]]] = {}
    for call, outcome in zip(calls, outcomes, strict=True):
        if call._loop is None:  # noqa: SLF001 - the module's own class
            call.settle(outcome)
        else:
            by_loop.setdefault(call._loop, []).append((call._waiter, outcome))  # noqa: SLF001
    for loop, answers in by_loop.items():
        _hand_over(loop, answers)
    for call in calls:
        if call._loop is not None:  # noqa: SLF001 - the module's own class
            call._release()  # noqa: SLF001


def _hand_over(loop: asyncio.AbstractEventLoop, answers: list[tuple[Any, Outcome]]) -> None:
    with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits for these
        loop.call_soon_threadsafe(_answer_all, answers)


def _answer_all(answers: list[tuple[asyncio.Future[Outputs], Outcome]]) -> None:
    for waiter, outcome in answers:
        if waiter.done():  # its caller left, or its deadline passed
            continue
        if isinstance(outcome, BaseException):
            waiter.set_exception(outcome)
        else:
            waiter.set_result(outcome)
