"""CallsHere: model calls run on the thread that asks, for front ends on server threads.

A synchronous server (grpcio's ``grpc.server``) runs each request on one of
its own worker threads, with no event loop to await on.  The DataPlane's
coroutines then complete in one step (see :func:`run_to_completion`): a
``thread``-mode call runs right on that worker (no hop to the plane's pool),
a batched call blocks it on the batch's result, and a servable's own
coroutine (``async`` mode) runs on one helper event loop while the worker
waits.  :func:`off_loop` is how a coroutine hands blocking work (a config
reload) to a thread under an event loop, or runs it at once on a server thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import threading
import time
from collections.abc import Callable, Coroutine, Iterable
from typing import Any, Final, TypeVar, final

import numpy.typing as npt

from servinglib.batching import BatchingServable
from servinglib.errors import DeadlineExceededError
from servinglib.servable import (
    CallStages,
    ExecutionMode,
    Servable,
    SignatureSpec,
    Tensors,
    call_resolved,
    call_resolved_async,
    stages_scope,
)
from servinglib.server.plane.call_pool import CallPool, CallSite, RunningCall

T = TypeVar("T")

_Outputs = dict[str, npt.NDArray[Any]]

_get_running_loop: Final = asyncio._get_running_loop  # noqa: SLF001 - the one check without a raise


_CLIENT_ACTIVE: contextvars.ContextVar[Callable[[], bool] | None] = contextvars.ContextVar(
    "servinglib_client_active", default=None
)


def watch_client(active: Callable[[], bool]) -> contextvars.Token[Callable[[], bool] | None]:
    """Tells calls run on this server thread how to ask whether their client is still there
    (grpcio's ``context.is_active``); give the token to :func:`unwatch_client` when the RPC ends.

    A call waiting for a place in its model's share asks it as it waits, and
    gives up with CANCELLED once the client has gone.
    """
    return _CLIENT_ACTIVE.set(active)


def unwatch_client(token: contextvars.Token[Callable[[], bool] | None]) -> None:
    """Ends what :func:`watch_client` started (server threads serve one RPC after another)."""
    _CLIENT_ACTIVE.reset(token)


def on_server_thread() -> bool:
    """True when no event loop runs on this thread: a coroutine must complete without suspending."""
    return _get_running_loop() is None


def run_to_completion(coroutine: Coroutine[Any, Any, T]) -> T:
    """Runs a coroutine that never suspends (a handler over the DataPlane on a server thread).

    Raises RuntimeError (after closing the coroutine) if it suspends: it
    awaited something only an event loop can complete.
    """
    try:
        coroutine.send(None)
    except StopIteration as done:
        result: T = done.value
        return result
    coroutine.close()
    raise RuntimeError("a handler awaited an event loop on a server thread")


async def off_loop(function: Callable[..., T], *args: Any) -> T:  # noqa: ANN401 - function's args
    """``function(*args)`` on a worker thread under an event loop; here, on a server thread."""
    if on_server_thread():
        return function(*args)
    return await asyncio.to_thread(function, *args)


@final
class CallsHere:
    """Runs model calls on the calling thread, and knows which run now (for shutdown and status).

    Thread-safe.
    """

    def __init__(self, pool: CallPool) -> None:
        self._pool = pool  # whose per-model shares THREAD calls here take a place in
        self._lock = threading.Lock()
        self._running: dict[int, tuple[CallSite, float, float | None]] = {}  # guarded by: _lock
        self._loop: asyncio.AbstractEventLoop | None = None  # guarded by: _lock; started on use

    def call(
        self,
        site: CallSite,
        servable: Servable,
        spec: SignatureSpec,
        inputs: Tensors,
        output_filter: Iterable[str] | None,
        *,
        deadline: float | None,
        stages: CallStages,
    ) -> _Outputs:
        """Runs the signature here (THREAD, in its model's share, or batched), or on the
        helper loop (the servable's own coroutine), within ``deadline``; marks ``stages``
        as the pool does (queued: waiting for a place in the model's share).

        Raises DeadlineExceededError when the deadline passed before the call,
        while it waited for a place in its model's share (CancelledError when
        its client left meanwhile: see :func:`watch_client`), while a batch or
        coroutine was awaited, or while the call ran (its answer comes too
        late for the client); the call's own errors.
        """
        if deadline is not None and deadline <= time.monotonic():
            raise DeadlineExceededError("Deadline exceeded before the model answered")
        name = site.signature_name
        if spec.execution_mode is ExecutionMode.ASYNC:
            stages.started_ns = stages.infer_started_ns = time.perf_counter_ns()
            if _batched(servable, name):
                with stages_scope(stages):  # the batch marks its own stages
                    outputs = self._run(
                        site, deadline, call_resolved, servable, name, spec, inputs, output_filter
                    )
            else:
                outputs = self._run(
                    site,
                    deadline,
                    self._await,
                    call_resolved_async(servable, name, spec, inputs, output_filter),
                    deadline,
                )
            if not stages.batch_size:
                stages.infer_ended_ns = stages.ended_ns = time.perf_counter_ns()
            return outputs
        stages.queued_ns = time.perf_counter_ns()
        self._pool.enter_here(site.model_name, deadline, client_active=_CLIENT_ACTIVE.get())
        try:
            return self._run(
                site, deadline, stages.call, servable, name, spec, inputs, output_filter
            )
        finally:
            self._pool.leave_here(site.model_name)

    def _run(
        self,
        site: CallSite,
        deadline: float | None,
        function: Callable[..., _Outputs],
        *args: Any,  # noqa: ANN401 - the function's arguments
    ) -> _Outputs:
        key = threading.get_ident()
        with self._lock:
            self._running[key] = (site, time.monotonic(), deadline)
        try:
            outputs = function(*args)
        finally:
            with self._lock:
                del self._running[key]
        # The call could not be cut off here; its client has had DEADLINE_EXCEEDED already.
        if deadline is not None and (late := time.monotonic() - deadline) > 0:
            raise DeadlineExceededError(f"The model answered {late:.3f} s past its deadline")
        return outputs

    def running(self) -> list[RunningCall]:
        """The calls running on server threads now."""
        now = time.monotonic()
        with self._lock:
            entries = list(self._running.values())
        return [
            RunningCall(site, now - started, deadline is not None and now > deadline)
            for site, started, deadline in entries
        ]

    def overdue(self) -> dict[tuple[str, int], int]:
        """Calls running past their deadline, by model name and version (none: left out)."""
        counts: dict[tuple[str, int], int] = {}
        for call in self.running():
            if call.overdue:
                key = (call.site.model_name, call.site.version)
                counts[key] = counts.get(key, 0) + 1
        return counts

    def close(self) -> None:
        """Stops the helper loop (if one started)."""
        with self._lock:
            loop, self._loop = self._loop, None
        if loop is not None:
            loop.call_soon_threadsafe(loop.stop)

    def _await(self, coroutine: Coroutine[Any, Any, _Outputs], deadline: float | None) -> _Outputs:
        future = asyncio.run_coroutine_threadsafe(coroutine, self._helper_loop())
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise DeadlineExceededError("Deadline exceeded before the model answered") from None

    def _helper_loop(self) -> asyncio.AbstractEventLoop:
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


def _batched(servable: Servable, name: str) -> bool:
    """Whether the ASYNC signature is a batched one (its ``call`` blocks on the batch)."""
    return isinstance(servable, BatchingServable) and name in servable.batched_signatures
