"""DataPlane: the request path every front end shares (lookup, where the call runs, deadline)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Iterable, Mapping
from typing import Any, final

import attrs
import numpy.typing as npt

from servinglib.core.servable_handle import ServableHandle
from servinglib.errors import DeadlineExceededError, ServingError, UnimplementedError
from servinglib.servable import (
    ExecutionMode,
    Servable,
    SignatureSpec,
    Tensors,
    call_resolved,
    call_resolved_async,
    deadline_scope,
    request_deadline,
    resolve_signature,
)
from servinglib.server.model_spec import ModelSpec
from servinglib.server.plane.call_pool import (
    CallPool,
    CallSite,
    RunningCall,
    default_max_calls_per_model,
)
from servinglib.server.plane.signature_cache import SignatureCache
from servinglib.server.server_core import ServerCore
from servinglib.server.status import ModelStatus

_log = logging.getLogger(__name__)

_NO_SCOPE = contextlib.nullcontext()  # reusable: it holds no state


def _default_workers() -> int:
    return min(32, 4 * (os.cpu_count() or 1))


@final
@attrs.frozen
class InferenceResult:
    """What a signature call returned, and which version and signature served it.  Immutable."""

    outputs: dict[str, npt.NDArray[Any]]
    model_name: str
    version: int
    signature_name: str


@final
class DataPlane:
    """Runs one request against a ServerCore the way every protocol must.

    Looks the version up (:meth:`ServerCore.servable_handle`: in-flight
    bound, labels), resolves the signature, and runs it where its execution
    mode says: THREAD on this plane's bounded worker pool, INLINE on the
    calling event loop, ASYNC as the servable's coroutine (batched
    signatures are ASYNC: they complete through the batch scheduler).  The
    deadline (``time.monotonic()`` seconds) bounds the whole call: past it
    the request fails with DEADLINE_EXCEEDED, and batching queues see it
    through :func:`servinglib.servable.request_deadline`.  The handle is
    released when the model call ends, even if the request gave up earlier,
    so a version never unloads under a running call.

    Isolation: the worker pool (``max_workers`` threads, default 4 per CPU
    up to 32) is shared, but at most ``max_calls_per_model`` calls of one
    model run on it at once (default half the pool); the model's further
    calls wait for its own calls to return, within their deadline.  Calls
    that outlive their deadline still hold their model's share until they
    return; :meth:`overdue_calls` counts them.  Every DEADLINE_EXCEEDED is
    logged, one line per request.
    Thread-safe; its coroutines run on any event loop.
    """

    def __init__(
        self,
        core: ServerCore,
        *,
        max_workers: int | None = None,
        max_calls_per_model: int | None = None,
    ) -> None:
        workers = max_workers or _default_workers()
        self._core = core
        self._pool = CallPool(
            workers,
            max_calls_per_model or default_max_calls_per_model(workers),
            "servinglib-call",
        )
        self._signatures = SignatureCache(core)

    @property
    def core(self) -> ServerCore:
        """The ServerCore requests go to."""
        return self._core

    @property
    def max_calls_per_model(self) -> int:
        """How many calls of one model may hold workers of the pool at once."""
        return self._pool.max_calls_per_model

    def overdue_calls(self) -> dict[str, int]:
        """Calls still running past their request's deadline, by model (none: left out)."""
        by_model: dict[str, int] = {}
        for (name, _version), count in self._pool.overdue().items():
            by_model[name] = by_model.get(name, 0) + count
        return by_model

    def model_status(self, name: str, version: int | None = None) -> ModelStatus:
        """:meth:`ServerCore.model_status`, with versions that have overdue calls flagged.

        A version whose calls run past their deadline (they hold workers of
        its model's share) carries a DEADLINE_EXCEEDED error saying how many.
        """
        status = self._core.model_status(name, version)
        overdue = self._pool.overdue()
        if not any(model == name for model, _ in overdue):
            return status
        versions = tuple(
            attrs.evolve(v, error=_overdue_error(count))
            if v.error is None and (count := overdue.get((name, v.version), 0))
            else v
            for v in status.versions
        )
        return attrs.evolve(status, versions=versions)

    def running_calls(self) -> list[RunningCall]:
        """The calls the worker pool runs now, longest running first."""
        return self._pool.running()

    def cut_off(self, error: ServingError) -> list[RunningCall]:
        """Answers every pool call still pending with ``error`` (at shutdown); the running ones.

        The running calls' threads go on until their model returns.
        """
        return self._pool.cut_off(error)

    def signatures(self, model_spec: ModelSpec) -> tuple[ModelSpec, Mapping[str, SignatureSpec]]:
        """The specific version ``model_spec`` selects now, and that version's signatures.

        For codecs that need the signature before the call (TF Serving's JSON
        is decoded by its dtypes; classify and regress check its method):
        pass the returned spec to :meth:`infer` so the checked version is the
        one that runs.  Answered from a cache that forgets at every version
        state change.  Raises what :meth:`ServerCore.model_metadata` raises.
        """
        return self._signatures.lookup(model_spec)

    async def infer(
        self,
        model_spec: ModelSpec,
        signature_name: str | None,
        inputs: Tensors,
        output_filter: Iterable[str] | None = None,
        *,
        deadline: float | None = None,
    ) -> InferenceResult:
        """Runs ``signature_name`` (None: the default) of the version ``model_spec`` picks.

        Raises the errors of :meth:`ServerCore.servable_handle` and
        :func:`call_signature`, UnimplementedError for a servable without
        signatures, DeadlineExceededError once ``deadline`` passes.
        """
        handle = self._core.servable_handle(model_spec)
        try:
            servable = _servable_of(handle, model_spec)
            name, spec = resolve_signature(servable, signature_name)
        except BaseException:
            handle.release()
            raise
        # Nothing to set for most requests: skip entering a deadline scope then.
        unset = deadline is None and request_deadline() is None
        with _NO_SCOPE if unset else deadline_scope(deadline):
            if spec.execution_mode is ExecutionMode.INLINE:  # no coroutine of its own
                try:
                    outputs = call_resolved(servable, name, spec, inputs, output_filter)
                finally:
                    handle.release()
            else:
                site = CallSite(model_spec.name, handle.id.version, name)
                started = time.monotonic()
                try:
                    outputs = await self._run(
                        handle,
                        site,
                        servable,
                        spec,
                        inputs,
                        output_filter=output_filter,
                        deadline=deadline,
                    )
                except (DeadlineExceededError, asyncio.CancelledError) as error:
                    _log_gave_up(site, error, deadline, started)
                    raise
        return InferenceResult(outputs, model_spec.name, handle.id.version, name)

    async def _run(
        self,
        handle: ServableHandle[Any],
        site: CallSite,
        servable: Servable,
        spec: SignatureSpec,
        inputs: Tensors,
        *,
        output_filter: Iterable[str] | None,
        deadline: float | None,
    ) -> dict[str, npt.NDArray[Any]]:
        name = site.signature_name
        if spec.execution_mode is ExecutionMode.ASYNC:
            try:
                return await _bounded(
                    call_resolved_async(servable, name, spec, inputs, output_filter), deadline
                )
            finally:
                handle.release()
        if deadline is not None and deadline <= time.monotonic():
            handle.release()
            raise _deadline_exceeded()
        try:
            future = self._pool.submit(
                site,
                deadline,
                handle.release,
                call_resolved,
                servable,
                name,
                spec,
                inputs,
                output_filter,
            )
        except BaseException:  # not queued (the pool is closed): nobody else releases it
            handle.release()
            raise
        return await future

    def close(self) -> None:
        """Stops the worker pool after the calls running on it, and following the core's events."""
        self._signatures.close()
        self._pool.close()


def _overdue_error(count: int) -> DeadlineExceededError:
    return DeadlineExceededError(
        f"{count} call(s) still running past their deadline, each holding a worker of this "
        "model's share until it returns"
    )


def _log_gave_up(
    site: CallSite, error: BaseException, deadline: float | None, started: float
) -> None:
    """One line per request that ended without the model's answer."""
    budget = "none" if deadline is None else f"{deadline - started:.3f} s"
    what = "DEADLINE_EXCEEDED" if isinstance(error, DeadlineExceededError) else "cancelled"
    _log.warning("%s: %s (deadline %s after the call)", site, what, budget)


def _servable_of(handle: ServableHandle[Any], model_spec: ModelSpec) -> Servable:
    servable = handle.servable
    if not isinstance(servable, Servable):
        raise UnimplementedError(
            f"Model {model_spec.name} serves a {type(servable).__name__}, which has no signatures"
        )
    return servable


def _deadline_exceeded() -> DeadlineExceededError:
    return DeadlineExceededError("Deadline exceeded before the model answered")


async def _bounded(awaitable: Any, deadline: float | None) -> dict[str, npt.NDArray[Any]]:  # noqa: ANN401 - a coroutine or a future
    if deadline is None:
        result: dict[str, npt.NDArray[Any]] = await awaitable
        return result
    remaining = deadline - time.monotonic()
    try:
        if remaining <= 0:
            raise TimeoutError
        async with asyncio.timeout(remaining):
            return await awaitable  # type: ignore[no-any-return]
    except TimeoutError:
        if asyncio.iscoroutine(awaitable):
            awaitable.close()
        raise _deadline_exceeded() from None
