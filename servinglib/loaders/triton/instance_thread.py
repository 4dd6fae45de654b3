"""InstanceThread: where the calls of one in-process Triton Python model instance run.

A Triton Python model's instance runs one ``execute`` at a time.  Placed on the worker pool,
its calls would each take a worker that then waits for the instance's lock: a wake-up of a
thread and a hand-over of the lock per call, and a hung ``execute`` would hold every worker
its model's share allows.  Here calls from an event loop wait in the instance's own queue and
one thread of its own runs them, in arrival order, back to back, answering each on its
caller's loop (as Triton's default scheduler runs one instance's requests one by one).
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import threading
from time import monotonic, perf_counter_ns
from typing import Any, final

import numpy.typing as npt

from servinglib.errors import UnavailableError
from servinglib.loaders.triton.queued_call import Outcome, QueuedCall
from servinglib.servable import ModelCall, Placement, deadline_exceeded

_Outputs = dict[str, npt.NDArray[Any]]

IDLE_S = 10.0
"""How long the instance's thread waits for a call before it ends (a later call starts it
again): a server of many models holds threads only for those called lately."""


@final
class InstanceThread(Placement):
    """Runs the calls of one instance (whose calls never overlap) on a thread of its own.

    From an event loop, a call waits in the instance's queue, first come first served; the
    thread (started by a call, ended after :data:`IDLE_S` with none) runs each in its
    caller's context and answers it on its caller's loop.  A call whose deadline passes, or
    whose caller leaves, while it waits is never run.  A thread with no event loop (a
    synchronous server's, an ensemble's step) runs its call itself: the servable keeps its
    calls from overlapping.  :meth:`close` ends the thread once it is idle.  Thread-safe.
    """

    def __init__(self, name: str, *, inline: bool = False, batch_dimension: bool = False) -> None:
        self._name = name
        self._inline = inline
        self._batch_dimension = batch_dimension
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._queue: collections.deque[tuple[QueuedCall, contextvars.Context]] = (
            collections.deque()
        )  # guarded by: _lock
        self._thread: threading.Thread | None = None  # guarded by: _lock; None: not running
        self._idle = False  # guarded by: _lock; the thread waits for a call
        self._closed = False  # guarded by: _lock

    async def run(self, call: ModelCall) -> _Outputs:
        if self._inline:
            return self.run_blocking(call)
        try:
            if call.deadline is not None and call.deadline <= monotonic():
                raise deadline_exceeded()
            call.stages.queued_ns = perf_counter_ns()
            queued = QueuedCall(call, None, 1, asyncio.get_running_loop())
            context = contextvars.copy_context()  # its deadline, extras and model caller
            with self._lock:
                if self._closed:
                    raise UnavailableError(f"{self._name} has stopped serving")
                self._queue.append((queued, context))
                if self._thread is None:
                    self._thread = threading.Thread(
                        target=self._serve, name=f"servinglib-instance {self._name}", daemon=True
                    )
                    self._thread.start()
                elif self._idle:
                    self._idle = False
                    self._wake.notify()
        except BaseException:
            call.release()
            raise
        return await queued.answer()

    def run_blocking(self, call: ModelCall) -> _Outputs:
        try:
            if call.deadline is not None and call.deadline <= monotonic():
                raise deadline_exceeded()
            call.stages.queued_ns = perf_counter_ns()
            return self._run(call)
        finally:
            call.release()

    def close(self) -> None:
        """Ends the thread once the calls queued have run (a version unloads only once its
        calls have ended, so none are)."""
        with self._lock:
            self._closed = True
            thread = self._thread
            self._wake.notify()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _serve(self) -> None:
        while True:
            with self._lock:
                while not self._queue:
                    if self._closed:
                        self._thread = None
                        return
                    self._idle = True
                    self._wake.wait(IDLE_S)
                    if self._idle and not self._queue:  # nobody woke it: idle too long
                        self._idle = False
                        self._thread = None
                        return
                    self._idle = False
                queued, context = self._queue.popleft()
            if queued.start(monotonic()):
                outcome: Outcome
                try:
                    outcome = context.run(self._run, queued.call)
                except BaseException as error:  # noqa: BLE001 - handed to the caller
                    outcome = error
                queued.settle(outcome)
                del outcome
            del queued, context  # let the request's arrays go while idle

    def _run(self, call: ModelCall) -> _Outputs:
        """The model's call; a request of rows (dimension 0) is a batch of that many, as
        Triton counts one its default scheduler runs alone."""
        outputs = call.run()
        if self._batch_dimension:
            call.stages.batch_of_rows(call.inputs)
        return outputs
