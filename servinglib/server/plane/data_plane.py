"""DataPlane: the request path every front end shares (lookup, where the call runs, deadline)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, final

import attrs
import numpy.typing as npt

from servinglib.core.servable_handle import ServableHandle
from servinglib.errors import (
    CancelledError,
    DeadlineExceededError,
    ServingError,
    UnimplementedError,
)
from servinglib.servable import (
    CallStages,
    ExecutionMode,
    Servable,
    SignatureSpec,
    Tensors,
    call_resolved_async,
    check_inputs,
    deadline_scope,
    request_deadline,
    resolve_signature,
    stages_scope,
    start_stream,
)
from servinglib.server.logging_config import LoggingConfig
from servinglib.server.model_spec import ModelSpec
from servinglib.server.observe.call_record import StreamObserver
from servinglib.server.observe.log_sink import LogSinkFactory
from servinglib.server.observe.request_logger import RequestLogger, RequestLogOptions
from servinglib.server.observe.statistics import InferenceStatistics
from servinglib.server.plane.call_pool import (
    CallPool,
    CallSite,
    RunningCall,
    default_max_calls_per_model,
)
from servinglib.server.plane.calls_here import CallsHere, on_server_thread, run_to_completion
from servinglib.server.plane.in_flight import InFlight
from servinglib.server.plane.model_questions import ModelQuestions
from servinglib.server.plane.public_errors import PublicErrors
from servinglib.server.plane.request_context import log_model_failure, request_id
from servinglib.server.plane.signature_cache import SignatureCache
from servinglib.server.plane.stream_budget import StreamBudget
from servinglib.server.plane.stream_limits import StreamLimits
from servinglib.server.plane.stream_producer import stream_producer
from servinglib.server.plane.streaming import (
    DEFAULT_BUFFER_PARTS,
    InferenceStream,
    OpenStreams,
    Part,
)
from servinglib.server.server_core import ServerCore

if TYPE_CHECKING:
    from servinglib.server.observe.tracing import Tracing

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

    Request logging: models whose config has a ``logging_config`` have
    their sampled requests written by :attr:`request_logger`, to the file
    sink or a sink of ``log_sinks`` (collector type → factory), within the
    bounds of ``request_log`` (the queue's requests and bytes, the files kept).
    Isolation: the worker pool (``max_workers`` threads, default 4 per CPU
    up to 32) is shared, but at most ``max_calls_per_model`` calls of one
    model run on it at once (default half the pool); the model's further
    calls wait for its own calls to return, within their deadline.  Calls
    that outlive their deadline still hold their model's share until they
    return; :meth:`overdue_calls` counts them.  Every DEADLINE_EXCEEDED is
    logged, one line per request.
    Every request that reaches a version is counted in Triton's statistics
    (outcomes, queue and compute durations, batches;
    ``questions.model_statistics``); with ``tracing``, its stages become
    spans (:class:`Tracing`).  Questions about models (readiness, status,
    metadata, which version a label or "latest" means) are answered by
    :attr:`questions`, for every front end alike; they count as no request.
    Errors reach clients through :meth:`public_error`: the server's own
    directories (models' local base paths, the model cache) are written
    ``<model name>`` / ``<model cache>`` unless ``show_paths_in_errors``.
    On a thread with no running event loop (a synchronous server's
    worker, which drives :meth:`infer`'s coroutine with
    :func:`~servinglib.server.plane.calls_here.run_to_completion`), the
    coroutine never suspends: THREAD calls run on that thread (in a place
    of their model's share of the pool, waiting for one there, the thread
    held, when the share is full), batched calls block it until their batch
    ran, ASYNC ones run on a helper loop while it waits; the deadline bounds
    the waits as above.
    Thread-safe; its coroutines run on any event loop, or on a server thread.
    """

    def __init__(
        self,
        core: ServerCore,
        *,
        max_workers: int | None = None,
        max_calls_per_model: int | None = None,
        on_stream: StreamObserver | None = None,
        log_sinks: Mapping[str, LogSinkFactory] | None = None,
        request_log: RequestLogOptions | None = None,
        tracing: Tracing | None = None,
        show_paths_in_errors: bool = False,
        streams: StreamLimits | None = None,
    ) -> None:
        workers = max_workers or _default_workers()
        self._core = core
        self._on_stream = on_stream
        self._pool = CallPool(
            workers,
            max_calls_per_model or default_max_calls_per_model(workers),
            "servinglib-call",
        )
        self._signatures = SignatureCache(core)
        self._here = CallsHere(self._pool)
        self._stream_limits = streams or StreamLimits()
        self._streams = OpenStreams(self._stream_limits.max_streams_per_model)
        self._stream_budget = StreamBudget(self._stream_limits.max_buffered_bytes)
        self._in_flight = InFlight()
        self._request_logger = RequestLogger(_logging_config_of(core), request_log, sinks=log_sinks)
        self._statistics = InferenceStatistics()
        self._tracing = tracing
        self._questions = ModelQuestions(
            core,
            self._statistics,
            self._overdue,
            self._pool.starved,
            PublicErrors(core, show_paths=show_paths_in_errors),
        )

    @property
    def core(self) -> ServerCore:
        """The ServerCore requests go to."""
        return self._core

    @property
    def questions(self) -> ModelQuestions:
        """Readiness, status, metadata and statistics of models, for every front end alike."""
        return self._questions

    @property
    def request_logger(self) -> RequestLogger:
        """Logs sampled requests of models with a ``logging_config``; :meth:`close` closes it."""
        return self._request_logger

    @property
    def tracing(self) -> Tracing | None:
        """The spans of requests (front ends start them), or None: tracing off."""
        return self._tracing

    @property
    def stream_budget(self) -> StreamBudget:
        """The bytes all streams' parts hold ahead of their clients (``streams``' bound)."""
        return self._stream_budget

    @property
    def max_calls_per_model(self) -> int:
        """How many calls of one model may hold workers of the pool at once."""
        return self._pool.max_calls_per_model

    def requests_in_flight(self) -> dict[str, int]:
        """Inference requests running now (:meth:`infer`), by model; models with none left out."""
        return self._in_flight.snapshot()

    def overdue_calls(self) -> dict[str, int]:
        """Calls still running past their request's deadline, by model (none: left out)."""
        by_model: dict[str, int] = {}
        for (name, _version), count in self._overdue().items():
            by_model[name] = by_model.get(name, 0) + count
        return by_model

    def running_calls(self) -> list[RunningCall]:
        """The calls the worker pool and server threads run now, longest running first."""
        calls = self._pool.running() + self._here.running()
        return sorted(calls, key=lambda call: -call.running_s)

    def _overdue(self) -> dict[tuple[str, int], int]:
        counts = self._pool.overdue()
        for key, count in self._here.overdue().items():
            counts[key] = counts.get(key, 0) + count
        return counts

    def cut_off(self, error: ServingError) -> list[RunningCall]:
        """Answers every pool call still pending with ``error`` (at shutdown); the running ones.

        The running calls' threads go on until their model returns (server
        threads' calls too: their server answers its clients at its stop).
        Open streams end too: their readers get ``error`` after the parts
        they have, and the models' generators are closed.
        """
        self._streams.cut_off(error)
        return self._pool.cut_off(error) + self._here.running()

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
        log_request: bool = True,
    ) -> InferenceResult:
        """Runs ``signature_name`` (None: the default) of the version ``model_spec`` picks.

        A model with a ``logging_config`` has its sampled successful calls
        logged as predict requests (``log_request=False``: the caller logs
        the request itself, as classify and regress do).  An exception of
        the model's own is logged once, with its traceback and the request's
        id (:mod:`~servinglib.server.plane.request_context`).  Raises the
        errors of :meth:`ServerCore.servable_handle` and
        :func:`call_signature`, UnimplementedError for a servable without
        signatures, DeadlineExceededError once ``deadline`` passes.
        """
        name = model_spec.name
        self._in_flight.enter(name)
        try:
            result = await self._infer_counted(
                model_spec, signature_name, inputs, output_filter, deadline
            )
        finally:
            self._in_flight.leave(name)
        if log_request and (logging := self._request_logger.sampled(name)) is not None:
            self._request_logger.log(
                logging,
                name,
                "predict",
                name,
                result.version,
                result.signature_name,
                inputs,
                result.outputs,
                None if output_filter is None else tuple(output_filter),
            )
        return result

    def infer_blocking(
        self,
        model_spec: ModelSpec,
        signature_name: str | None,
        inputs: Tensors,
        output_filter: Iterable[str] | None = None,
        *,
        deadline: float | None = None,
        log_request: bool = True,
    ) -> InferenceResult:
        """:meth:`infer` for a thread with no event loop (a synchronous server's worker):
        the same call, run where its placement runs calls for such a thread, blocking it
        until the answer or the deadline.  Raises what :meth:`infer` raises.
        """
        return run_to_completion(
            self.infer(
                model_spec,
                signature_name,
                inputs,
                output_filter,
                deadline=deadline,
                log_request=log_request,
            )
        )

    async def _infer_counted(
        self,
        model_spec: ModelSpec,
        signature_name: str | None,
        inputs: Tensors,
        output_filter: Iterable[str] | None,
        deadline: float | None,
    ) -> InferenceResult:
        """The call, with its statistics and trace (Triton's statistics extension, tracing)."""
        started_ns = time.perf_counter_ns()
        handle = self._core.servable_handle(model_spec)
        stages = CallStages()
        try:
            outputs, name = await self._infer(
                handle,
                model_spec,
                signature_name,
                inputs,
                output_filter=output_filter,
                deadline=deadline,
                stages=stages,
            )
        except BaseException as error:
            self._statistics.record_failure(
                model_spec.name, handle.id.version, started_ns, time.perf_counter_ns()
            )
            if self._tracing is not None:
                self._tracing.record_call(
                    model_spec.name, handle.id.version, signature_name, stages, error
                )
            raise
        self._statistics.record_success(
            model_spec.name, handle.id.version, started_ns, time.perf_counter_ns(), stages
        )
        if self._tracing is not None:
            self._tracing.record_call(model_spec.name, handle.id.version, name, stages, None)
        return InferenceResult(outputs, model_spec.name, handle.id.version, name)

    async def _infer(
        self,
        handle: ServableHandle[Any],
        model_spec: ModelSpec,
        signature_name: str | None,
        inputs: Tensors,
        *,
        output_filter: Iterable[str] | None,
        deadline: float | None,
        stages: CallStages,
    ) -> tuple[dict[str, npt.NDArray[Any]], str]:
        """Runs the call where its execution mode says; releases ``handle`` when it ends.

        An exception of the model's own is logged once, with the request's id.
        """
        try:
            servable = _servable_of(handle, model_spec)
            name, spec = resolve_signature(servable, signature_name)
        except BaseException:
            handle.release()
            raise
        try:
            # Nothing to set for most requests: skip entering a deadline scope then.
            unset = deadline is None and request_deadline() is None
            with _NO_SCOPE if unset else deadline_scope(deadline):
                if spec.execution_mode is ExecutionMode.INLINE:  # no coroutine of its own
                    try:
                        outputs = stages.call(servable, name, spec, inputs, output_filter)
                    finally:
                        handle.release()
                else:
                    site = CallSite(model_spec.name, handle.id.version, name)
                    started = time.monotonic()
                    try:
                        if on_server_thread():  # a synchronous gRPC server's thread runs it
                            try:
                                outputs = self._here.call(
                                    site,
                                    servable,
                                    spec,
                                    inputs,
                                    output_filter,
                                    deadline=deadline,
                                    stages=stages,
                                )
                            finally:
                                handle.release()
                        else:
                            outputs = await self._run(
                                handle,
                                site,
                                servable,
                                spec,
                                inputs,
                                output_filter=output_filter,
                                deadline=deadline,
                                stages=stages,
                            )
                    except (DeadlineExceededError, CancelledError, asyncio.CancelledError) as error:
                        _log_gave_up(site, error, deadline, started)
                        raise
        except Exception as error:
            log_model_failure(error, model_spec.name, handle.id.version, name)
            raise
        return outputs, name

    def open_stream(
        self,
        model_spec: ModelSpec,
        signature_name: str | None,
        inputs: Tensors,
        output_filter: Iterable[str] | None = None,
        *,
        deadline: float | None = None,
        buffer_parts: int = DEFAULT_BUFFER_PARTS,
    ) -> InferenceStream:
        """Starts ``signature_name`` of the version ``model_spec`` picks as a stream of parts.

        A streaming signature gives its parts (see
        :class:`~servinglib.server.plane.streaming.InferenceStream`:
        ``buffer_parts`` buffered and a batch in hand ahead of the reader at
        most, the deadline bounding the whole stream, one request in flight
        until it is closed; the bounds of ``streams``: the parts' bytes
        charged to :attr:`stream_budget`, the idle timeout); any other gives
        one part, its outputs, as :meth:`infer` runs it.  Raises at once
        what the lookup and the request's checks raise (as :meth:`infer`);
        errors of the model arrive through the stream.  Raises UnavailableError
        at once when the model has ``streams.max_streams_per_model`` open.
        Close the stream (``async with``) on the event loop that reads it.
        """
        self._streams.enter(model_spec.name)
        try:
            stream = self._open_stream(
                model_spec,
                signature_name,
                inputs,
                output_filter,
                deadline=deadline,
                buffer_parts=buffer_parts,
            )
        except BaseException:
            self._streams.leave(model_spec.name)
            raise
        self._streams.add(stream)
        return stream

    def _open_stream(
        self,
        model_spec: ModelSpec,
        signature_name: str | None,
        inputs: Tensors,
        output_filter: Iterable[str] | None,
        *,
        deadline: float | None,
        buffer_parts: int,
    ) -> InferenceStream:
        handle = self._core.servable_handle(model_spec)
        try:
            servable = _servable_of(handle, model_spec)
            name, spec = resolve_signature(servable, signature_name)
            site = CallSite(model_spec.name, handle.id.version, name)
            if spec.streaming:
                parts, wanted = start_stream(servable, name, spec, inputs, output_filter)
                produce = stream_producer(
                    self._pool,
                    site,
                    spec,
                    parts,
                    wanted=wanted,
                    deadline=deadline,
                    batch_parts=buffer_parts,
                    budget=self._stream_budget,
                )
                release = handle.release
            else:
                check_inputs(spec, inputs)
                handle.release()  # infer takes its own: the call counts once, as any request
                pinned = ModelSpec(model_spec.name, handle.id.version)

                async def produce(
                    put: Callable[[Part], Awaitable[None]], _room: Callable[[], int]
                ) -> None:
                    result = await self.infer(
                        pinned, name, inputs, output_filter, deadline=deadline
                    )
                    await put(result.outputs)

                release = _no_release
        except BaseException:
            handle.release()
            raise
        return InferenceStream(
            site,
            produce,
            release=release,
            deadline=deadline,
            buffer_parts=buffer_parts,
            observer=self._on_stream,
            streaming=spec.streaming,
            on_close=self._streams.discard,
            budget=self._stream_budget,
            idle_timeout_s=self._stream_limits.idle_timeout_s,
        )

    def open_streams(self) -> int:
        """How many streams :meth:`open_stream` opened are not closed yet."""
        return len(self._streams)

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
        stages: CallStages,
    ) -> dict[str, npt.NDArray[Any]]:
        name = site.signature_name
        if spec.execution_mode is ExecutionMode.ASYNC:
            stages.started_ns = stages.infer_started_ns = time.perf_counter_ns()
            try:
                with stages_scope(stages):  # a batching servable fills in its own marks
                    outputs = await _bounded(
                        call_resolved_async(servable, name, spec, inputs, output_filter), deadline
                    )
            finally:
                handle.release()
            if not stages.batch_size:
                stages.infer_ended_ns = stages.ended_ns = time.perf_counter_ns()
            return outputs
        if deadline is not None and deadline <= time.monotonic():
            handle.release()
            raise _deadline_exceeded()
        stages.queued_ns = time.perf_counter_ns()
        try:
            future = self._pool.submit(
                site,
                deadline,
                handle.release,
                stages.call,
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

    def public_error(self, error: ServingError) -> ServingError:
        """``error`` as a client reads it: the server's directories left out, unless the
        plane was made with ``show_paths_in_errors`` (the log keeps the full text)."""
        return self._questions.public_error(error)

    def drain(self) -> None:
        """The server takes no more requests: the calls still to run may use the whole worker
        pool (a model is no longer held to its share, unless a call of it runs past its
        deadline), so a drain of one model's calls finishes in the pool's time."""
        self._pool.drain()

    def close(self) -> None:
        """Stops the worker pool (after its running calls), the core's events, the request log."""
        self._signatures.close()
        self._pool.close()
        self._here.close()
        self._request_logger.close()


def _no_release() -> None:
    pass


def _logging_config_of(core: ServerCore) -> Callable[[str], LoggingConfig | None]:
    def logging_config(name: str) -> LoggingConfig | None:
        model = core.config.model(name)
        return None if model is None else model.logging_config

    return logging_config


def _log_gave_up(
    site: CallSite, error: BaseException, deadline: float | None, started: float
) -> None:
    """One line per request that ended without the model's answer, with the request's id."""
    budget = "none" if deadline is None else f"{deadline - started:.3f} s"
    what = "DEADLINE_EXCEEDED" if isinstance(error, DeadlineExceededError) else "cancelled"
    _log.warning(
        "Request %s: %s: %s (deadline %s after the call)", request_id() or "-", site, what, budget
    )


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
