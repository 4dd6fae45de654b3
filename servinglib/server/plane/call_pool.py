"""CallPool: the worker threads models share, none of which may hold more than its share."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, final

import attrs

from servinglib.errors import CancelledError, DeadlineExceededError, ServingError
from servinglib.servable import CallSite

_log = logging.getLogger("servinglib.server.plane.data_plane")

CLIENT_POLL_S = 0.05
"""How often a server thread waiting for a place asks whether its client has gone."""

_Outputs = dict[str, Any]


def default_max_calls_per_model(max_workers: int) -> int:
    """Half the pool (at least one call): a model whose calls hang leaves the rest to others."""
    return max(1, max_workers // 2)


@final
@attrs.frozen
class RunningCall:
    """A call a worker runs now: where, for how long, and whether past its deadline.  Immutable."""

    site: CallSite
    running_s: float
    overdue: bool


@final
class CallPool:
    """Bounded worker threads that run calls for coroutines: a lean ``run_in_executor``.

    Threads start on demand up to ``max_workers``; at most
    ``max_calls_per_model`` calls of one model run at a time (its further
    calls wait in its own queue) until the function really returns.  Past its
    deadline a call's future fails with DeadlineExceededError: a call not
    started is never run, a running one is overdue (logged, counted by
    :meth:`overdue`) and written off, another thread starting in its place, up
    to twice ``max_workers`` (:meth:`starved` once all are overdue).  After
    :meth:`drain` models without overdue calls may use every worker.  See
    architecture.md's table of threads.
    Thread safety: ``submit`` from any event loop's thread; the rest from
    any thread; ``close`` once.
    """

    def __init__(self, max_workers: int, max_calls_per_model: int, thread_name_prefix: str) -> None:
        self._max_workers = max_workers
        self._max_calls_per_model = max_calls_per_model
        self._prefix = thread_name_prefix
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)  # one count per worker waiting for a job
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []  # guarded by: _lock
        self._closed = False  # guarded by: _lock
        self._admitted: dict[str, int] = {}  # guarded by: _lock; per model, queued or running
        self._waiting: dict[str, collections.deque[_Job | _Ticket]] = {}  # guarded by: _lock
        self._live: set[_Job] = set()  # guarded by: _lock; admitted or waiting, not finished
        self._drained = threading.Condition(self._lock)  # notified when _live empties
        self._overdue: dict[tuple[str, int], int] = {}  # guarded by: _lock; by model, version
        self._here: dict[int, tuple[CallSite, float, float | None]] = {}  # guarded by: _lock
        self._written_off = 0  # guarded by: _lock; overdue calls running on the pool's threads
        self._draining = False  # guarded by: _lock

    @property
    def max_workers(self) -> int:
        """How many worker threads at most."""
        return self._max_workers

    @property
    def max_calls_per_model(self) -> int:
        """How many calls of one model may be on the workers at once."""
        return self._max_calls_per_model

    def submit(
        self,
        site: CallSite,
        deadline: float | None,
        on_done: Callable[[], None],
        function: Callable[..., _Outputs],
        *args: Any,  # noqa: ANN401 - the function's arguments
    ) -> asyncio.Future[_Outputs]:
        """Runs ``function(*args)`` on a worker in a copy of the current context.

        ``on_done`` runs after the call, whether or not it ran.
        ``deadline``: ``time.monotonic()`` seconds, or None.
        Requires: called on a running event loop's thread.  Raises
        RuntimeError once closed (``on_done`` is then the caller's).
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[_Outputs] = loop.create_future()
        job = _Job(
            site,
            context=contextvars.copy_context(),
            loop=loop,
            future=future,
            on_done=on_done,
            function=function,
            args=args,
        )
        model = site.model_name
        with self._lock:
            if self._closed:
                raise RuntimeError("the DataPlane is closed")
            self._live.add(job)
            admitted = self._admitted.get(model, 0)
            if admitted < self._share_locked(model):
                self._admitted[model] = admitted + 1
            else:
                self._waiting.setdefault(model, collections.deque()).append(job)
                job.waiting = True
        if job.waiting:
            # Failed (deadline) or cancelled (the client left): out of the queue at once.
            future.add_done_callback(lambda _: self._abandon(job))
        else:
            self._enqueue(job)
        if deadline is not None:
            job.timer = loop.call_later(max(0.0, deadline - time.monotonic()), self._expire, job)
        return future

    def starved(self) -> bool:
        """True while every thread the pool may have runs a call past its deadline: no call
        can run until one returns (readiness reports the server unready then)."""
        with self._lock:
            return self._written_off >= 2 * self._max_workers

    def drain(self) -> None:
        """Ends the per-model shares (the server stopped taking requests and lets the ones in
        flight finish): their calls waiting for a place take any free worker, except those of
        a model with a call past its deadline.  Idempotent.
        """
        with self._lock:
            self._draining = True
            models = [model for model, waiting in self._waiting.items() if waiting]
        for model in models:
            while True:
                with self._lock:
                    full = self._admitted.get(model, 0) >= self._share_locked(model)
                    if full or not self._waiting[model]:
                        break
                    self._admitted[model] = self._admitted.get(model, 0) + 1
                    dropped, admit = self._pass_place_locked(model)  # the next one waiting
                for candidate in dropped:
                    candidate.on_done()
                if admit is not None:
                    self._enqueue(admit)

    def enter_running(self, site: CallSite, deadline: float | None) -> bool:
        """Counts the call the calling server thread runs itself (wherever it is placed) among
        the running ones, until :meth:`leave_running`; False (nothing to leave) when the
        thread's running call is counted already: this one is a call inside it."""
        ident = threading.get_ident()
        with self._lock:
            if ident in self._here:
                return False
            self._here[ident] = (site, time.monotonic(), deadline)
            return True

    def leave_running(self) -> None:
        """Ends what :meth:`enter_running` began for the calling thread."""
        with self._lock:
            del self._here[threading.get_ident()]

    def overdue(self) -> dict[tuple[str, int], int]:
        """Calls running past their deadline, by model name and version (none: left out)."""
        now = time.monotonic()
        with self._lock:
            counts = {key: n for key, n in self._overdue.items() if n}
            late = [site for site, _, d in self._here.values() if d is not None and now > d]
        for site in late:
            counts[site.model_name, site.version] = (
                counts.get((site.model_name, site.version), 0) + 1
            )
        return counts

    def running(self) -> list[RunningCall]:
        """The calls workers and server threads run now, longest running first."""
        now = time.monotonic()
        with self._lock:
            jobs = [job for job in self._live if job.started_at is not None]
            here = list(self._here.values())
        calls = [RunningCall(j.site, now - (j.started_at or now), j.overdue) for j in jobs]
        calls += [RunningCall(site, now - at, d is not None and now > d) for site, at, d in here]
        return sorted(calls, key=lambda call: -call.running_s)

    def cut_off(self, error: ServingError) -> list[RunningCall]:
        """Fails every call not finished yet with ``error`` (at shutdown); the running ones.

        Calls not started are never run; running ones go on (a thread
        cannot be stopped) and still count until they return.
        """
        running = self.running()
        with self._lock:
            jobs = list(self._live)
        for job in jobs:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                job.loop.call_soon_threadsafe(_fail, job.future, error)
        return running

    def close(self) -> None:
        """Lets the workers finish the calls submitted so far, then joins them."""
        with self._lock:
            self._closed = True
            while self._live:
                self._drained.wait()
            threads = list(self._threads)
        for _ in threads:
            self._jobs.put(None)
        for thread in threads:
            thread.join()

    def _share_locked(self, model: str) -> int:
        """How many calls of ``model`` may be admitted: its share, or, draining, the whole pool
        unless one of its calls already runs past its deadline (a hung model keeps its share)."""
        if self._draining and not any(
            n for (name, _version), n in self._overdue.items() if name == model
        ):
            return self._max_workers
        return self._max_calls_per_model

    def _enqueue(self, job: _Job) -> None:
        if not self._idle.acquire(blocking=False):
            self._start_worker()
        self._jobs.put(job)

    def _start_worker(self) -> None:
        with self._lock:
            if len(self._threads) >= self._max_workers + min(self._written_off, self._max_workers):
                return  # every worker is busy: the job waits in the queue
            thread = threading.Thread(
                target=self._work, name=f"{self._prefix}_{len(self._threads)}", daemon=True
            )
            self._threads.append(thread)
        thread.start()

    def _work(self) -> None:
        jobs = self._jobs
        while (job := jobs.get()) is not None:
            job.started_at = time.monotonic()  # before the look at the future: see _expire
            if job.future.done():  # failed while queued (a racy read: see _expire)
                job.on_done()
            else:
                result, error = _call(job)
                with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                    job.loop.call_soon_threadsafe(_settle, job, result, error)
                del result, error
            self._finish(job)
            del job  # let the request's arrays go while idle
            self._idle.release()

    def enter_here(
        self,
        model: str,
        deadline: float | None,
        *,
        client_active: Callable[[], bool] | None = None,
    ) -> None:
        """Takes a place in ``model``'s share for a call the calling thread runs itself.

        For a synchronous server's worker: it waits (holding its thread) in the
        model's queue, behind the pool's calls, while the share is full; call
        :meth:`leave_here` once the call returns.  While it waits it asks
        ``client_active`` every :data:`CLIENT_POLL_S` (a server thread hears of
        no cancellation otherwise).  Raises DeadlineExceededError when
        ``deadline`` passes first, CancelledError once the client has gone,
        RuntimeError once closed.
        """
        with self._lock:
            if self._closed:
                raise RuntimeError("the DataPlane is closed")
            admitted = self._admitted.get(model, 0)
            if admitted < self._share_locked(model):
                self._admitted[model] = admitted + 1
                return
            ticket = _Ticket(self._lock)
            self._waiting.setdefault(model, collections.deque()).append(ticket)
            while not ticket.granted:
                timeout = None if deadline is None else deadline - time.monotonic()
                if timeout is not None and timeout <= 0:
                    self._waiting[model].remove(ticket)
                    raise _deadline_exceeded()
                if client_active is not None:
                    if not client_active():
                        self._waiting[model].remove(ticket)
                        raise CancelledError("The client cancelled the call while it waited")
                    timeout = CLIENT_POLL_S if timeout is None else min(timeout, CLIENT_POLL_S)
                ticket.wake.wait(timeout)

    def leave_here(self, model: str) -> None:
        """Gives back the place :meth:`enter_here` took: the model's next call takes it."""
        with self._lock:
            dropped, admit = self._pass_place_locked(model)
        for candidate in dropped:
            candidate.on_done()
        if admit is not None:
            self._enqueue(admit)

    def _finish(self, job: _Job) -> None:
        """The call returned (or was dropped): its model's next waiting call takes its place."""
        model = job.site.model_name
        with self._lock:
            self._live.discard(job)
            if job.overdue:
                self._overdue[model, job.site.version] -= 1
                self._written_off -= 1
            dropped, admit = self._pass_place_locked(model)
            if not self._live:
                self._drained.notify_all()
        if job.overdue:
            _log.warning(
                "%s: the call overdue since its deadline returned after %.1f s",
                job.site,
                time.monotonic() - (job.started_at or 0.0),
            )
        for candidate in dropped:
            candidate.on_done()
        if admit is not None:
            self._enqueue(admit)

    def _pass_place_locked(self, model: str) -> tuple[list[_Job], _Job | None]:
        """A place of ``model``'s share is free: its next waiting call (a job to enqueue, or a
        thread to wake) takes it, or the count drops; the jobs failed while they waited."""
        dropped: list[_Job] = []
        waiting = self._waiting.get(model)
        while waiting:
            candidate = waiting.popleft()
            if isinstance(candidate, _Ticket):
                candidate.granted = True
                candidate.wake.notify()
                return dropped, None
            candidate.waiting = False
            if candidate.future.done():  # failed while it waited: never run
                self._live.discard(candidate)
                dropped.append(candidate)
            else:
                return dropped, candidate
        self._admitted[model] -= 1
        return dropped, None

    def _abandon(self, job: _Job) -> None:
        """A waiting call's future is done (deadline, cancelled, cut off): it never runs."""
        with self._lock:
            if not job.waiting:
                return
            self._waiting[job.site.model_name].remove(job)
            job.waiting = False
            self._live.discard(job)
            if not self._live:
                self._drained.notify_all()
        job.on_done()

    def _expire(self, job: _Job) -> None:
        """At the deadline, on the job's loop: fail the future; flag the call if it runs."""
        if not job.future.done():
            job.future.set_exception(_deadline_exceeded())
        # A worker marks a job started before it looks at the future: a job
        # not marked now will see the done future and not run.
        with self._lock:
            if job.started_at is None or job.overdue or job not in self._live:
                return
            job.overdue = True
            key = (job.site.model_name, job.site.version)
            self._overdue[key] = count = self._overdue.get(key, 0) + 1
            self._written_off += 1
        if not self._jobs.empty():
            self._start_worker()  # in the overdue call's place
        _log.warning(
            "%s: a call is still running past its deadline and holds a worker until it "
            "returns (%d such calls of this version)",
            job.site,
            count,
        )


class _Ticket:
    """A thread waiting for a place in its model's share (:meth:`CallPool.enter_here`)."""

    __slots__ = ("granted", "wake")

    def __init__(self, lock: threading.Lock) -> None:
        self.granted = False  # guarded by: CallPool._lock
        self.wake = threading.Condition(lock)


class _Job:
    """One call: what to run, where to answer, and its place in its model's share."""

    __slots__ = (
        "args",
        "context",
        "function",
        "future",
        "loop",
        "on_done",
        "overdue",
        "site",
        "started_at",
        "timer",
        "waiting",
    )

    def __init__(
        self,
        site: CallSite,
        *,
        context: contextvars.Context,
        loop: asyncio.AbstractEventLoop,
        future: asyncio.Future[_Outputs],
        on_done: Callable[[], None],
        function: Callable[..., _Outputs],
        args: tuple[Any, ...],
    ) -> None:
        self.site = site
        self.context = context
        self.loop = loop
        self.future = future
        self.on_done = on_done
        self.function = function
        self.args = args
        self.waiting = False  # guarded by: CallPool._lock; in its model's waiting queue
        self.overdue = False  # guarded by: CallPool._lock
        self.started_at: float | None = None  # set once, by the worker
        self.timer: asyncio.TimerHandle | None = None  # touched on the loop only


def _call(job: _Job) -> tuple[_Outputs | None, BaseException | None]:
    try:
        return job.context.run(job.function, *job.args), None
    except BaseException as error:  # noqa: BLE001 - handed to the awaiting coroutine
        return None, error
    finally:
        job.on_done()


def _settle(job: _Job, result: _Outputs | None, error: BaseException | None) -> None:
    if job.timer is not None:
        job.timer.cancel()
    future = job.future
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)  # type: ignore[arg-type] # a result whenever no error


def _fail(future: asyncio.Future[_Outputs], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)


def _deadline_exceeded() -> DeadlineExceededError:
    return DeadlineExceededError("Deadline exceeded before the model answered")
