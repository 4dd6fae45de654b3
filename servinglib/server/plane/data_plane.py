"""DataPlane: the request path every front end shares (lookup, where the call runs, deadline)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
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
from servinglib.model_calls import caller_scope
from servinglib.servable import (
    CallSite,
    CallStages,
    ExecutionMode,
    ModelCall,
    Placement,
    Servable,
    SignatureSpec,
    Tensors,
    check_inputs,
    deadline_scope,
    request_deadline,
    resolve_signature,
    start_stream,
)
from servinglib.server.logging_config import LoggingConfig
from servinglib.server.model_spec import ModelSpec
from servinglib.server.observe.call_record import (
    CallObserver,
    CallRecord,
    StreamObserver,
    StreamObserverAdapter,
    StreamRecord,
)
from servinglib.server.observe.log_sink import LogSinkFactory
from servinglib.server.observe.request_context import log_model_failure, request_id
from servinglib.server.observe.request_logger import RequestLogger, RequestLogOptions
from servinglib.server.observe.statistics import InferenceStatistics
from servinglib.server.plane.call_pool import CallPool, RunningCall, default_max_calls_per_model
from servinglib.server.plane.cold_models import ColdModels
from servinglib.server.plane.in_flight import InFlight
from servinglib.server.plane.inner_calls import PlaneCaller
from servinglib.server.plane.model_questions import ModelQuestions
from servinglib.server.plane.placements import (
    CoroutinePlacement,
    InlinePlacement,
    PoolPlacement,
)
from servinglib.server.plane.public_errors import PublicErrors
from servinglib.server.plane.response_cache import CacheUsage
from servinglib.server.plane.response_cache_config import ResponseCacheConfig
from servinglib.server.plane.response_caching import ResponseCaching
from servinglib.server.plane.sequence_gauges import SequenceGauge, sequence_gauges
from servinglib.server.plane.shadowing import Outputs, Shadowing, ShadowUsage
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
from servinglib.server.plane.version_choice import VersionChoice
from servinglib.server.server_core import ServerCore

if TYPE_CHECKING:
    from servinglib.server.observe.tracing import Tracing

_log = logging.getLogger(__name__)

_Produce = Callable[[Callable[[Part], Awaitable[None]], Callable[[], int]], Awaitable[None]]

_NO_SCOPE = contextlib.nullcontext()  # reusable: it holds no state


def _scope(deadline: float | None) -> contextlib.AbstractContextManager[None]:
    """The call's deadline as the request's (its own, not an enclosing request's); nothing to
    enter for most requests."""
    if deadline is None and request_deadline() is None:
        return _NO_SCOPE
    return deadline_scope(deadline)


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

    Admits it (``max_requests_in_flight_per_model``: past it, UNAVAILABLE at
    once), looks the version up (:meth:`ServerCore.servable_handle`), resolves
    the signature and chooses, once, where the call runs: the servable's own
    :class:`~servinglib.servable.Placement` or the plane's for the execution
    mode (:mod:`~servinglib.server.plane.placements`); :meth:`infer` runs it
    for an event loop, :meth:`infer_blocking` for a thread with none.  The
    deadline (``time.monotonic()`` seconds) bounds the whole call; the handle
    is released when the model call ends, so a version never unloads under a
    running call.  The worker pool (``max_workers`` threads, default 4 per CPU
    up to 32) is shared, at most ``max_calls_per_model`` calls of one model
    at once (default half).  Each call that reached a version, and each
    closed stream, is one :class:`~servinglib.server.observe.call_record.CallRecord`
    handed to the observers: statistics, ``tracing``, the :attr:`request_logger`
    (``log_sinks``, ``request_log``'s bounds), ``on_stream``, ``observers``.
    Questions about models are :attr:`questions`'; errors reach clients through
    :meth:`public_error` (paths hidden unless ``show_paths_in_errors``).
    ``response_cache``: the server's response cache, in front of the placement
    of the calls of models that ask for it
    (:class:`~servinglib.server.plane.response_caching.ResponseCaching`).
    A request naming no version goes where its model's traffic rule sends
    it (:class:`~servinglib.server.plane.version_choice.VersionChoice`, a
    lookup before placement); answered calls are copied to the rule's
    shadow version off the request path
    (:class:`~servinglib.server.plane.shadowing.Shadowing`, an observer).
    Thread-safe; :meth:`infer` runs on any event loop.
    """

    def __init__(
        self,
        core: ServerCore,
        *,
        max_workers: int | None = None,
        max_calls_per_model: int | None = None,
        observers: Sequence[CallObserver] = (),
        on_stream: StreamObserver | None = None,
        log_sinks: Mapping[str, LogSinkFactory] | None = None,
        request_log: RequestLogOptions | None = None,
        tracing: Tracing | None = None,
        show_paths_in_errors: bool = False,
        streams: StreamLimits | None = None,
        response_cache: ResponseCacheConfig | None = None,
    ) -> None:
        workers = max_workers or _default_workers()
        self._core = core
        self._pool = CallPool(
            workers,
            max_calls_per_model or default_max_calls_per_model(workers),
            "servinglib-call",
        )
        self._coroutines = CoroutinePlacement()
        self._by_mode: dict[ExecutionMode, Placement] = {
            ExecutionMode.INLINE: InlinePlacement(),
            ExecutionMode.THREAD: PoolPlacement(self._pool),
            ExecutionMode.ASYNC: self._coroutines,
        }
        self._caller = PlaneCaller(self, self._coroutines.helper_loop)
        self._signatures = SignatureCache(core)
        self._caching = ResponseCaching(core, response_cache)
        self._choice = VersionChoice(core)
        self._in_flight = InFlight(core.options.max_requests_in_flight_per_model)
        self._shadowing = Shadowing(core, self._run_shadow, in_flight=self._in_flight.count)
        self._stream_limits = streams or StreamLimits()
        self._streams = OpenStreams(self._stream_limits.max_streams_per_model)
        self._stream_budget = StreamBudget(self._stream_limits.max_buffered_bytes)
        core.on_demand.count_requests_with(self._in_flight.count)
        self._cold = ColdModels(core.on_demand, self._in_flight)
        self._request_logger = RequestLogger(_logging_config_of(core), request_log, sinks=log_sinks)
        self._tracing = tracing
        statistics = InferenceStatistics()
        self._observers: tuple[CallObserver, ...] = (
            statistics,
            *(() if tracing is None else (tracing,)),
            self._request_logger,
            self._shadowing,
            *(() if on_stream is None else (StreamObserverAdapter(on_stream),)),
            *observers,
        )
        self._questions = ModelQuestions(
            core,
            statistics,
            self._pool.overdue,
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

    def response_cache_usage(self) -> CacheUsage | None:
        """What the response cache holds and has counted; None without one."""
        return self._caching.usage()

    def sequence_gauges(self) -> Mapping[str, SequenceGauge]:
        """Each sequence model's active sequences, backlog and slots (others left out)."""
        return sequence_gauges(self._core)

    def shadow_usage(self) -> ShadowUsage:
        """What the copies of calls to shadow versions counted: outcomes and latency, by model."""
        return self._shadowing.usage()

    def requests_in_flight(self) -> dict[str, int]:
        """Inference requests running now (:meth:`infer`), by model; models with none left out."""
        return self._in_flight.snapshot()

    def overdue_calls(self) -> dict[str, int]:
        """Calls still running past their request's deadline, by model (none: left out)."""
        by_model: dict[str, int] = {}
        for (name, _version), count in self._pool.overdue().items():
            by_model[name] = by_model.get(name, 0) + count
        return by_model

    def running_calls(self) -> list[RunningCall]:
        """The calls the worker pool and server threads run now, longest running first."""
        return self._pool.running()

    def cut_off(self, error: ServingError) -> list[RunningCall]:
        """Answers every pool call still pending with ``error`` (at shutdown); the running ones.

        The running calls' threads go on until their model returns (server
        threads' calls too: their server answers its clients at its stop).
        Open streams end too: their readers get ``error`` after the parts
        they have, and the models' generators are closed.
        """
        self._streams.cut_off(error)
        return self._pool.cut_off(error)

    async def loaded(self, model_spec: ModelSpec, *, deadline: float | None = None) -> None:
        """Waits, within ``deadline``, until a model loaded on demand is loaded, starting its
        load (at once for any other model): for a codec that reads the signatures before
        :meth:`infer` (:meth:`signatures`).  Raises the load's error, or
        DeadlineExceededError (the load goes on)."""
        if (waiting := self._cold.waiting(model_spec.name, deadline, counted=False)) is not None:
            await waiting

    def loaded_blocking(self, model_spec: ModelSpec, *, deadline: float | None = None) -> None:
        """:meth:`loaded` for a thread with no event loop (a synchronous server's)."""
        self._cold.wait_blocking(model_spec.name, deadline, counted=False)

    def signatures(self, model_spec: ModelSpec) -> tuple[ModelSpec, Mapping[str, SignatureSpec]]:
        """The specific version ``model_spec`` selects now, and that version's signatures.

        For codecs that need the signature before the call (TF Serving's JSON
        is decoded by its dtypes; classify and regress check its method):
        pass the returned spec to :meth:`infer` so the checked version is the
        one that runs.  Answered from a cache that forgets at every version
        state change.  Raises what :meth:`ServerCore.model_metadata` raises;
        for a model loaded on demand that is not loaded, starts its load and
        raises UnavailableError (await :meth:`loaded` first to wait for it).
        """
        self._cold.refuse_while_loading(model_spec.name)
        return self._signatures.lookup(self._choice.choose(model_spec))

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
        id (:mod:`~servinglib.server.observe.request_context`).  Raises the
        errors of :meth:`ServerCore.servable_handle` and
        :func:`call_signature`, UnavailableError at once when the model is
        at ``max_requests_in_flight_per_model``, UnimplementedError for a
        servable without signatures, DeadlineExceededError once ``deadline``
        passes.
        """
        started_ns = time.perf_counter_ns()
        name = model_spec.name
        self._in_flight.enter(name)
        if (waiting := self._cold.waiting(name, deadline)) is not None:
            try:
                await waiting
            except BaseException:
                self._in_flight.leave(name)
                raise
        call, placement = self._place(model_spec, signature_name, inputs, output_filter, deadline)
        try:
            with _scope(deadline), caller_scope(self._caller):
                outputs = await placement.run(call)
        except BaseException as error:
            self._failed(call, error, started_ns)
            raise
        return self._answered(call, outputs, started_ns, log_request)

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
        """:meth:`infer` for a thread with no event loop (a synchronous server's worker),
        blocking it until the answer or the deadline: the call runs where its placement runs
        calls for such a thread (a ``thread`` call on this very thread, in a place of its
        model's share of the pool).  Raises what :meth:`infer` raises.
        """
        started_ns = time.perf_counter_ns()
        name = model_spec.name
        self._in_flight.enter(name)
        try:
            self._cold.wait_blocking(name, deadline)
        except BaseException:
            self._in_flight.leave(name)
            raise
        call, placement = self._place(model_spec, signature_name, inputs, output_filter, deadline)
        pool = self._pool
        try:
            with _scope(deadline), caller_scope(self._caller):
                counted = pool.enter_running(call.site, deadline)
                try:
                    outputs = placement.run_blocking(call)
                finally:
                    if counted:
                        pool.leave_running()
            # A call here cannot be cut off: its client has had DEADLINE_EXCEEDED already.
            if deadline is not None and (late := time.monotonic() - deadline) > 0:
                raise DeadlineExceededError(f"The model answered {late:.3f} s past its deadline")
        except BaseException as error:
            self._failed(call, error, started_ns)
            raise
        return self._answered(call, outputs, started_ns, log_request)

    def _place(
        self,
        model_spec: ModelSpec,
        signature_name: str | None,
        inputs: Tensors,
        output_filter: Iterable[str] | None,
        deadline: float | None,
        *,
        background: bool = False,
    ) -> tuple[ModelCall, Placement]:
        """The admitted call of the version ``model_spec`` picks, and where it runs: the
        servable's placement for its signature, or the plane's for its execution mode.

        ``background``: a call of the server's own (a shadow copy), run by the
        calling thread: not counted in flight, and a ``thread`` call runs on
        that thread without a place in its model's share of the pool, so no
        client's call waits for it.

        Requires: the request entered in flight (a model loaded on demand is
        waited for after that, so it is not unloaded under the request).
        The call is one request in flight until the model's call ends (its
        release), not only until its answer; on failure it leaves at once.
        Raises what the lookup raises; what resolving the signature raises
        (recorded as the version's failed call).
        """
        name = model_spec.name
        in_flight = None if background else self._in_flight
        try:
            model_spec = self._choice.choose(model_spec)
            handle = self._core.servable_handle(model_spec)
        except BaseException:
            if in_flight is not None:
                in_flight.leave(name)
            raise
        release = _Release(handle, in_flight, name)
        try:
            servable = _servable_of(handle, model_spec)
            signature, spec = resolve_signature(servable, signature_name)
        except BaseException as error:
            release()
            site = CallSite(name, handle.id.version, signature_name or "")
            log_model_failure(error, site.model_name, site.version, site.signature_name)
            self._emit(_record(site, CallStages(), error, inputs, output_filter, 0, None, True))
            raise
        site = CallSite(name, handle.id.version, signature)
        stages = CallStages()
        call = ModelCall(site, servable, spec, inputs, output_filter, deadline, stages, release)
        mode = spec.execution_mode
        if background and mode is ExecutionMode.THREAD:
            mode = ExecutionMode.INLINE
        placement = servable.placement(signature) or self._by_mode[mode]
        return call, self._caching.around(call, placement)

    def _answered(
        self,
        call: ModelCall,
        outputs: dict[str, npt.NDArray[Any]],
        started_ns: int,
        log_request: bool,
    ) -> InferenceResult:
        site = call.site
        self._emit(
            _record(
                site,
                call.stages,
                None,
                call.inputs,
                call.output_filter,
                started_ns,
                outputs,
                log_request,
            )
        )
        return InferenceResult(outputs, site.model_name, site.version, site.signature_name)

    def _failed(self, call: ModelCall, error: BaseException, started_ns: int) -> None:
        """Logs a call that ended without the model's answer (one line, with the request's
        id) or with the model's own exception (its traceback, once); records it."""
        site = call.site
        if isinstance(error, (DeadlineExceededError, CancelledError, asyncio.CancelledError)):
            _log_gave_up(site, error, call.deadline, started_ns)
        elif isinstance(error, Exception):
            log_model_failure(error, site.model_name, site.version, site.signature_name)
        record = _record(site, call.stages, error, call.inputs, call.output_filter, started_ns)
        self._emit(record)

    def _run_shadow(
        self,
        model_spec: ModelSpec,
        signature_name: str,
        inputs: Tensors,
        output_filter: Iterable[str] | None,
    ) -> Outputs:
        """One copy of a call to its shadow version, run by the shadowing thread itself as a
        background call (see :meth:`_place`); recorded as a call of its version, not logged."""
        started_ns = time.perf_counter_ns()
        call, placement = self._place(
            model_spec, signature_name or None, inputs, output_filter, None, background=True
        )
        try:
            with caller_scope(self._caller):
                outputs = placement.run_blocking(call)
        except BaseException as error:
            self._failed(call, error, started_ns)
            raise
        self._answered(call, outputs, started_ns, log_request=False)
        return outputs

    def _emit(self, record: CallRecord) -> None:
        for observer in self._observers:
            try:
                observer.call_finished(record)
            except Exception:  # noqa: BLE001 - an observer never changes the answer
                _log.exception("Observer %r failed on a call of %s", observer, record.model_name)

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
        name = model_spec.name
        self._streams.enter(name)
        try:
            self._in_flight.enter(name)
        except BaseException:
            self._streams.leave(name)
            raise
        try:
            self._cold.refuse_while_loading(name)
            stream = self._open_stream(
                model_spec,
                signature_name,
                inputs,
                output_filter,
                deadline=deadline,
                buffer_parts=buffer_parts,
            )
        except BaseException:
            self._in_flight.leave(name)
            self._streams.leave(name)
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
        model_spec = self._choice.choose(model_spec)
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
            else:
                check_inputs(spec, inputs)
                handle.release()  # infer takes its own, and its own place in flight
                pinned = ModelSpec(model_spec.name, handle.id.version)

                async def produce(
                    put: Callable[[Part], Awaitable[None]], _room: Callable[[], int]
                ) -> None:
                    result = await self.infer(
                        pinned, name, inputs, output_filter, deadline=deadline
                    )
                    await put(result.outputs)

        except BaseException:
            handle.release()
            raise
        produce = self._with_caller(produce)
        release: Callable[[], None] = _no_release
        if spec.streaming:  # one request in flight until the stream closes
            release = _Release(handle, self._in_flight, model_spec.name)
        else:
            self._in_flight.leave(model_spec.name)

        def finished(record: StreamRecord) -> None:
            self._emit(_record(site, CallStages(), None, inputs, output_filter, stream=record))

        return InferenceStream(
            site,
            produce,
            release=release,
            deadline=deadline,
            buffer_parts=buffer_parts,
            observer=finished,
            streaming=spec.streaming,
            on_close=self._streams.discard,
            budget=self._stream_budget,
            idle_timeout_s=self._stream_limits.idle_timeout_s,
        )

    def _with_caller(self, produce: _Produce) -> _Produce:
        """``produce`` with this plane as the stream's model caller (its model may call others)."""
        caller = self._caller

        async def produce_here(
            put: Callable[[Part], Awaitable[None]], room: Callable[[], int]
        ) -> None:
            with caller_scope(caller):
                await produce(put, room)

        return produce_here

    def open_streams(self) -> int:
        """How many streams :meth:`open_stream` opened are not closed yet."""
        return len(self._streams)

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
        self._shadowing.close()
        self._signatures.close()
        self._caching.close()
        self._pool.close()
        self._coroutines.close()
        self._request_logger.close()


def _no_release() -> None:
    pass


@final
class _Release:
    """Releases a call's handle and its place among the requests in flight, once, whoever
    calls it first (a placement may call it from two threads).  Thread-safe."""

    __slots__ = ("_in_flight", "_name", "_pending")

    def __init__(self, handle: ServableHandle[Any], in_flight: InFlight | None, name: str) -> None:
        self._pending = [handle]  # list.pop is atomic: the one caller that gets it releases
        self._in_flight = in_flight
        self._name = name

    def __call__(self) -> None:
        try:
            handle = self._pending.pop()
        except IndexError:
            return
        handle.release()
        if self._in_flight is not None:
            self._in_flight.leave(self._name)


def _logging_config_of(core: ServerCore) -> Callable[[str], LoggingConfig | None]:
    def logging_config(name: str) -> LoggingConfig | None:
        model = core.config.model(name)
        return None if model is None else model.logging_config

    return logging_config


def _record(  # noqa: PLR0917 - a record's fields, positional on the hot path
    site: CallSite,
    stages: CallStages,
    error: BaseException | None,
    inputs: Tensors,
    output_filter: Iterable[str] | None,
    started_ns: int = 0,
    outputs: Mapping[str, npt.NDArray[Any]] | None = None,
    log_request: bool = True,
    stream: StreamRecord | None = None,
) -> CallRecord:
    ended_ns = time.perf_counter_ns()
    return CallRecord(
        site.model_name,
        site.version,
        site.signature_name,
        started_ns or ended_ns,
        ended_ns,
        stages,
        error,
        inputs,
        outputs,
        None if output_filter is None else tuple(output_filter),
        log_request,
        stream,
    )


def _log_gave_up(
    site: CallSite, error: BaseException, deadline: float | None, started_ns: int
) -> None:
    """One line per request that ended without the model's answer, with the request's id."""
    if deadline is None:
        budget = "none"
    else:
        started = time.monotonic() - (time.perf_counter_ns() - started_ns) / 1e9
        budget = f"{deadline - started:.3f} s"
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
