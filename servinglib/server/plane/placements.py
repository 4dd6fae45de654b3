"""The plane's own placements: where a call runs when its servable does not say.

By execution mode (:class:`~servinglib.servable.ExecutionMode`): ``inline``
on the event loop or the server thread that asks (:class:`InlinePlacement`),
``thread`` on a worker of the bounded pool, or on the asking server thread in
a place of its model's share (:class:`PoolPlacement`), ``async`` as the
servable's coroutine on the event loop, or on one helper loop while a server
thread waits (:class:`CoroutinePlacement`).  A servable places its calls
itself through :meth:`~servinglib.servable.Servable.placement` (a batch queue
does).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from typing import Any, final

import numpy.typing as npt

from servinglib.servable import ModelCall, Placement, deadline_exceeded
from servinglib.server.plane.call_pool import CallPool
from servinglib.server.plane.calls_here import client_watch

_Outputs = dict[str, npt.NDArray[Any]]


@final
class InlinePlacement(Placement):
    """Runs the call where it is asked: for calls of microseconds that gain nothing from a
    thread (``inline`` signatures).  Thread-safe."""

    async def run(self, call: ModelCall) -> _Outputs:
        try:
            return call.run()
        finally:
            call.release()

    def run_blocking(self, call: ModelCall) -> _Outputs:
        try:
            return call.run()
        finally:
            call.release()


@final
class PoolPlacement(Placement):
    """``thread`` signatures: a worker of ``pool`` runs the call for an event loop; a server
    thread runs it itself, in a place of its model's share of the pool (waiting for one,
    the thread held, while the share is full).  Thread-safe."""

    def __init__(self, pool: CallPool) -> None:
        self._pool = pool

    async def run(self, call: ModelCall) -> _Outputs:
        deadline = call.deadline
        if deadline is not None and deadline <= time.monotonic():
            call.release()
            raise deadline_exceeded()
        call.stages.queued_ns = time.perf_counter_ns()
        try:
            future = self._pool.submit(call.site, deadline, call.release, call.run)
        except BaseException:  # not queued (the pool is closed): nobody else releases it
            call.release()
            raise
        return await future

    def run_blocking(self, call: ModelCall) -> _Outputs:
        try:
            deadline = call.deadline
            if deadline is not None and deadline <= time.monotonic():
                raise deadline_exceeded()
            call.stages.queued_ns = time.perf_counter_ns()
            model = call.site.model_name
            self._pool.enter_here(model, deadline, client_active=client_watch())
            try:
                return call.run()
            finally:
                self._pool.leave_here(model)
        finally:
            call.release()


@final
class CoroutinePlacement(Placement):
    """``async`` signatures: the servable's coroutine, on the asking event loop; for a server
    thread, on one helper event loop (started on first use) while the thread waits.
    Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None  # guarded by: _lock

    async def run(self, call: ModelCall) -> _Outputs:
        return await call.run_async()

    def run_blocking(self, call: ModelCall) -> _Outputs:
        try:
            deadline = call.deadline
            if deadline is not None and deadline <= time.monotonic():
                raise deadline_exceeded()
            future = asyncio.run_coroutine_threadsafe(call.run_async(), self.helper_loop())
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                return future.result(timeout)
            except concurrent.futures.TimeoutError:
                future.cancel()
                raise deadline_exceeded() from None
        finally:
            call.release()  # idempotent: also when the coroutine never started

    def close(self) -> None:
        """Stops the helper loop (if one started)."""
        with self._lock:
            loop, self._loop = self._loop, None
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)

    def helper_loop(self) -> asyncio.AbstractEventLoop:
        """The helper event loop (started now if it is not yet)."""
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                threading.Thread(
                    target=_run_until_stopped,
                    args=(self._loop,),
                    name="servinglib-async-calls",
                    daemon=True,
                ).start()
            return self._loop


def _run_until_stopped(loop: asyncio.AbstractEventLoop) -> None:
    try:
        loop.run_forever()
    finally:
        loop.close()
