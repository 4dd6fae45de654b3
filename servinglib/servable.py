"""The inference contract every platform implements: signatures of numpy tensors."""

from __future__ import annotations

import abc
import asyncio
import contextlib
import contextvars
import enum
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from time import monotonic, perf_counter_ns
from typing import Any, Generic, TypeVar, final

import attrs
import numpy as np
import numpy.typing as npt

from servinglib.errors import (
    DeadlineExceededError,
    FailedPreconditionError,
    InternalError,
    InvalidArgumentError,
    UnimplementedError,
    wrong_type,
)

DEFAULT_SIGNATURE = "serving_default"
"""The signature a request naming none gets (TF Serving's ``kDefaultServingSignatureDefKey``)."""
PREDICT_METHOD = "tensorflow/serving/predict"
CLASSIFY_METHOD = "tensorflow/serving/classify"
REGRESS_METHOD = "tensorflow/serving/regress"

_T = TypeVar("_T")

Tensors = Mapping[str, npt.NDArray[Any]]
"""Tensor name → value; string tensors are object arrays of ``bytes``."""

_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "servinglib_request_deadline", default=None
)


def request_deadline() -> float | None:
    """The current request's deadline in ``time.monotonic()`` seconds, or None (no deadline).

    Front ends set it (:func:`deadline_scope`) from the gRPC deadline or the
    REST timeout; whatever waits on the request's behalf (the batching
    queue) gives up with DEADLINE_EXCEEDED once it has passed.  It is a
    context variable, so it follows the request across ``await`` and into
    ``asyncio.to_thread``.
    """
    return _deadline.get()


def deadline_scope(deadline: float | None) -> contextlib.AbstractContextManager[None]:
    """Makes ``deadline`` (``time.monotonic()`` seconds; None: none) the request's deadline."""
    return _Scope(_deadline, deadline)


class _Scope(Generic[_T]):
    """A context variable set for a ``with`` block: half what a generator context manager costs.

    Not thread-safe (one per ``with``), as context variable tokens are not.
    """

    __slots__ = ("_token", "_value", "_var")

    def __init__(self, var: contextvars.ContextVar[_T], value: _T) -> None:
        self._var, self._value = var, value

    def __enter__(self) -> None:
        self._token = self._var.set(self._value)

    def __exit__(self, *_exc: object) -> None:
        self._var.reset(self._token)


@final
class CallStages:
    """Where one call's time went, as ``time.perf_counter_ns()`` marks (0: not reached).

    ``queued_ns``: handed to where it waits (a pool, a batch queue);
    ``started_ns``: left the wait; ``infer_started_ns`` / ``infer_ended_ns``:
    around the model's own call; ``ended_ns``: outputs ready.  A batched call
    also gets ``batch_size`` (padding excluded) and ``leads_batch`` (True for
    the one request per batch that reports its execution).  A request to a model whose
    dimension 0 is the batch gets ``rows``, that dimension, and counts as that many
    inferences (Triton's ``inference_count``; 0: one).  A call the response
    cache looked up gets ``cache_hit`` (True: answered from the cache, no other
    mark set; False: a miss) and ``cache_ns`` (the lookup, and on a miss the
    insertion).  A servable that
    runs requests elsewhere fills it through :func:`call_stages`.
    Not thread-safe: one writer at a time, the reader after it.
    """

    __slots__ = (
        "batch_size",
        "cache_hit",
        "cache_ns",
        "ended_ns",
        "infer_ended_ns",
        "infer_started_ns",
        "leads_batch",
        "queued_ns",
        "rows",
        "started_ns",
    )

    def __init__(self) -> None:
        self.queued_ns = 0
        self.started_ns = 0
        self.infer_started_ns = 0
        self.infer_ended_ns = 0
        self.ended_ns = 0
        self.batch_size = 0
        self.leads_batch = False
        self.rows = 0
        self.cache_hit: bool | None = None
        self.cache_ns = 0

    def call(
        self,
        servable: Servable,
        name: str,
        spec: SignatureSpec,
        inputs: Tensors,
        output_filter: Iterable[str] | None,
    ) -> dict[str, npt.NDArray[Any]]:
        """:func:`call_resolved`, marking started, around the model's call, and ended."""
        wanted = self._start(spec, inputs, output_filter)
        return self._end(name, spec, wanted, servable.call(name, inputs, wanted))

    async def call_async(
        self,
        servable: Servable,
        name: str,
        spec: SignatureSpec,
        inputs: Tensors,
        output_filter: Iterable[str] | None,
    ) -> dict[str, npt.NDArray[Any]]:
        """:meth:`call` through :meth:`Servable.call_async`."""
        wanted = self._start(spec, inputs, output_filter)
        return self._end(name, spec, wanted, await servable.call_async(name, inputs, wanted))

    def batch_of_rows(self, inputs: Tensors) -> None:
        """Marks a call of a model whose dimension 0 is the batch, run alone: a batch of its
        rows (its first input's dimension 0), which it leads.

        Requires: ``inputs`` passed the signature's checks (the call ran)."""
        first = next(iter(inputs.values()), None)
        if first is not None and first.ndim:
            self.batch_size = self.rows = first.shape[0]
            self.leads_batch = True

    def _start(
        self, spec: SignatureSpec, inputs: Tensors, output_filter: Iterable[str] | None
    ) -> frozenset[str] | None:
        self.started_ns = perf_counter_ns()
        wanted = _prepare(spec, inputs, output_filter)
        self.infer_started_ns = perf_counter_ns()
        return wanted

    def _end(
        self, name: str, spec: SignatureSpec, wanted: frozenset[str] | None, outputs: dict[str, Any]
    ) -> dict[str, npt.NDArray[Any]]:
        self.infer_ended_ns = perf_counter_ns()
        checked = _checked_outputs(name, spec, wanted, outputs)
        self.ended_ns = perf_counter_ns()
        return checked


_stages: contextvars.ContextVar[CallStages | None] = contextvars.ContextVar(
    "servinglib_call_stages", default=None
)


def call_stages() -> CallStages | None:
    """The current request's :class:`CallStages`, or None (no one is timing it).

    Set by the DataPlane around ASYNC calls (:func:`stages_scope`); batching
    reads it when it queues a request and fills it from its batch thread.
    """
    return _stages.get()


def stages_scope(stages: CallStages) -> contextlib.AbstractContextManager[None]:
    """Makes ``stages`` the current request's :class:`CallStages` (see :func:`call_stages`)."""
    return _Scope(_stages, stages)


@final
class ExecutionMode(enum.Enum):
    """Where a front end runs a signature's call.

    THREAD (the default): on a bounded worker pool, so a slow model never
    stalls the event loop.  INLINE: on the event loop itself, for calls of
    a few microseconds.  ASYNC: the servable's own coroutine
    (:meth:`Servable.call_async`).
    """

    THREAD = "thread"
    INLINE = "inline"
    ASYNC = "async"


def _to_dtype(value: npt.DTypeLike) -> np.dtype[Any]:
    dtype = np.dtype(value)
    if dtype.kind in "SUa":  # fixed-width strings: string tensors are bytes objects
        return np.dtype(object)
    return dtype


def _to_shape(value: Iterable[int] | None) -> tuple[int, ...] | None:
    if value is None:
        return None
    shape = tuple(int(d) for d in value)
    if any(d < -1 for d in shape):
        raise ValueError(f"shape dimensions are sizes or -1 (unknown), got {shape}")
    return shape


@final
@attrs.frozen
class TensorSpec:
    """A signature's tensor: its name, dtype and shape.

    ``dtype`` is a numpy dtype; string tensors use ``object`` (items are
    ``bytes``).  ``shape`` uses -1 for a dimension of unknown size, and is
    None when even the rank is unknown.  ``tensor_name`` is the tensor's
    name inside the model (TF Serving's ``TensorInfo.name``, e.g. ``x:0``),
    defaulting to ``name``.  An ``optional`` input may be left out of a
    request (Triton's ``optional: true``).  Immutable, so thread-safe.
    """

    name: str
    dtype: np.dtype[Any] = attrs.field(converter=_to_dtype)
    shape: tuple[int, ...] | None = attrs.field(default=None, converter=_to_shape)
    tensor_name: str = attrs.field()
    optional: bool = attrs.field(default=False, kw_only=True)

    @tensor_name.default
    def _default_tensor_name(self) -> str:
        return self.name

    @property
    def is_string(self) -> bool:
        """True for string tensors (object arrays of bytes)."""
        return self.dtype.kind == "O"

    def check(self, value: npt.NDArray[Any]) -> None:
        """Raises InvalidArgumentError if ``value`` does not fit this spec (dtype, rank, sizes).

        A ``value`` that is not a numpy array (a list, say) is a TypeError.
        """
        if not isinstance(value, np.ndarray):
            raise wrong_type(
                f"Input tensor '{self.name}'",
                f"a numpy.ndarray (np.asarray(value, dtype={self.dtype.name!r}) makes one)",
                value,
            )
        if value.dtype != self.dtype:
            raise InvalidArgumentError(
                f"Input tensor '{self.name}' has dtype {_dtype_name(value.dtype)}, "
                f"but the signature expects {_dtype_name(self.dtype)}"
            )
        shape = self.shape
        if shape is None or shape == value.shape:
            return
        if value.ndim == len(shape):
            for want, got in zip(shape, value.shape, strict=True):
                if want not in (-1, got):
                    break
            else:
                return
        raise InvalidArgumentError(
            f"Input tensor '{self.name}' has shape {list(value.shape)}, "
            f"but the signature expects {_shape_text(shape)}"
        )


def _dtype_name(dtype: np.dtype[Any]) -> str:
    return "string" if dtype.kind == "O" else dtype.name


def _shape_text(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join("?" if d == -1 else str(d) for d in shape) + "]"


def _freeze_specs(
    value: Mapping[str, TensorSpec] | Iterable[TensorSpec],
) -> Mapping[str, TensorSpec]:
    specs = list(value.values()) if isinstance(value, Mapping) else list(value)
    return {spec.name: spec for spec in specs}


@final
@attrs.frozen
class SignatureSpec:
    """One callable signature of a servable: its inputs, outputs, method and execution mode.

    ``inputs`` / ``outputs`` may be given as a mapping or a list of
    TensorSpecs; they are keyed by tensor name.  A ``streaming`` signature
    answers with a stream of parts (:meth:`Servable.call_stream`), each part
    a mapping of the outputs ``outputs`` describes; it cannot be called
    whole (:func:`call_resolved` refuses it).  ``response_cache``: the model's
    answers are a function of the request alone, so a server with a response
    cache may answer a request it has answered before from the cache, without
    calling the model (never a streaming signature's).  Immutable, so thread-safe.
    """

    inputs: Mapping[str, TensorSpec] = attrs.field(converter=_freeze_specs)
    outputs: Mapping[str, TensorSpec] = attrs.field(converter=_freeze_specs)
    method_name: str = PREDICT_METHOD
    execution_mode: ExecutionMode = ExecutionMode.THREAD
    streaming: bool = False
    response_cache: bool = attrs.field(default=False, kw_only=True)


class Servable(abc.ABC):
    """A loaded model version: named signatures taking and returning numpy tensors.

    Important: :meth:`call` receives inputs already checked against the
    signature (names, dtypes, shapes) by :func:`call_signature`, and must
    return every output of the signature, or those in ``output_filter``.
    Thread safety: :meth:`call` may be called from many threads at once; a
    servable that cannot run calls concurrently must serialize them itself.
    """

    @property
    @abc.abstractmethod
    def signatures(self) -> Mapping[str, SignatureSpec]:
        """Every signature, by name (``serving_default`` is the default)."""

    @abc.abstractmethod
    def call(
        self, signature_name: str, inputs: Tensors, output_filter: frozenset[str] | None = None
    ) -> dict[str, npt.NDArray[Any]]:
        """Runs one signature.

        Requires: ``signature_name`` is in :attr:`signatures` and ``inputs``
        fit it; ``output_filter`` (None = all) names outputs of it.
        Raise InvalidArgumentError for inputs the model rejects.
        """

    async def call_async(
        self, signature_name: str, inputs: Tensors, output_filter: frozenset[str] | None = None
    ) -> dict[str, npt.NDArray[Any]]:
        """Runs a signature whose execution mode is ASYNC; by default calls :meth:`call`."""
        return self.call(signature_name, inputs, output_filter)

    def call_stream(
        self, signature_name: str, inputs: Tensors, output_filter: frozenset[str] | None = None
    ) -> Iterator[dict[str, npt.NDArray[Any]]]:
        """Starts a streaming signature (THREAD or INLINE): an iterator of output parts.

        Requires: as :meth:`call`, and the signature is ``streaming``.
        Important: each part holds every output of the signature (or those
        in ``output_filter``); ``next()`` runs where the execution mode says,
        one part at a time, and may raise (ServingError) to end the stream
        with an error.  The caller ``close()`` s an iterator it stops reading
        early, and only between ``next()`` calls, so a generator's
        ``finally`` runs.  Nothing runs before the first ``next()`` that a
        generator would not run.  Default: UnimplementedError.
        """
        raise UnimplementedError(f"Signature '{signature_name}' cannot stream")

    def call_stream_async(
        self, signature_name: str, inputs: Tensors, output_filter: frozenset[str] | None = None
    ) -> AsyncIterator[dict[str, npt.NDArray[Any]]]:
        """Starts a streaming signature whose execution mode is ASYNC: an async iterator of parts.

        As :meth:`call_stream`, on the event loop; the caller ``aclose()`` s
        an async generator it stops reading early.  Default: UnimplementedError.
        """
        raise UnimplementedError(f"Signature '{signature_name}' cannot stream")

    def placement(self, signature_name: str) -> Placement | None:
        """Where calls of ``signature_name`` run, when the servable decides it (a batch queue,
        its own instances); None, the default: where its execution mode says, on the plane's
        own placements (the event loop, the worker pool, a server thread).

        Requires: ``signature_name`` is in :attr:`signatures`.  Important:
        cheap and stable for the servable's life (asked on every call).
        """
        return None

    def batches_itself(self, signature_name: str) -> bool:
        """True when :meth:`placement` gathers the calls of ``signature_name`` into batches of
        its own (a Triton Python model's ``dynamic_batching``): the server's batching then
        leaves the signature alone.  Default: False.

        Requires: ``signature_name`` is in :attr:`signatures`.  Important: stable for the
        servable's life.
        """
        return False

    def close(self) -> None:  # noqa: B027 - an optional hook: most servables hold nothing to close
        """Releases what the servable holds; called once when its version unloads.

        Requires: no call is running or will start (the manager unloads a
        version only after its last handle is released).  Default: nothing.
        """


def resolve_signature(servable: Servable, signature_name: str | None) -> tuple[str, SignatureSpec]:
    """The signature a request names (empty/None: ``serving_default``), with its spec.

    Raises FailedPreconditionError (TF Serving's code) naming the key when
    the servable has no such signature; TypeError when ``servable`` is not a
    Servable (a handle instead of its ``servable``, say).
    """
    if not isinstance(servable, Servable):
        raise wrong_type(
            "The servable called", "a Servable (handle.servable, not the handle)", servable
        )
    return find_signature(servable.signatures, signature_name)


def find_signature(
    signatures: Mapping[str, SignatureSpec], signature_name: str | None
) -> tuple[str, SignatureSpec]:
    """:func:`resolve_signature` among ``signatures`` (e.g. a version's metadata)."""
    name = signature_name or DEFAULT_SIGNATURE
    spec = signatures.get(name)
    if spec is None:
        known = ", ".join(sorted(signatures)) or "none"
        raise FailedPreconditionError(
            f'Serving signature key "{name}" not found (signatures: {known}).'
        )
    return name, spec


def check_inputs(spec: SignatureSpec, inputs: Tensors) -> None:
    """Raises InvalidArgumentError naming the tensor if ``inputs`` do not fit ``spec``.

    Inputs that are not a mapping of names to numpy arrays are a TypeError.
    """
    if not isinstance(inputs, Mapping):
        raise wrong_type("The inputs", "a mapping of tensor name to numpy.ndarray", inputs)
    if inputs.keys() == spec.inputs.keys():  # the common case: skip the set arithmetic
        for name, value in inputs.items():
            spec.inputs[name].check(value)
        return
    unknown = sorted(set(inputs) - spec.inputs.keys())
    if unknown:
        raise InvalidArgumentError(
            f"Unknown input tensor '{unknown[0]}': the signature takes {_names(spec.inputs)}"
        )
    missing = sorted(n for n in spec.inputs.keys() - set(inputs) if not spec.inputs[n].optional)
    if missing:
        raise InvalidArgumentError(
            f"Missing input tensor '{missing[0]}': the signature takes {_names(spec.inputs)}"
        )
    for name, value in inputs.items():
        spec.inputs[name].check(value)


def check_call(
    spec: SignatureSpec, inputs: Tensors, output_filter: Iterable[str] | None
) -> frozenset[str] | None:
    """Checks a call of ``spec`` as :func:`call_resolved` does, for a placement that runs it
    otherwise (a batch of requests): the output filter to pass on (None: all outputs)."""
    return _prepare(spec, inputs, output_filter)


def call_signature(
    servable: Servable,
    signature_name: str | None,
    inputs: Tensors,
    output_filter: Iterable[str] | None = None,
) -> dict[str, npt.NDArray[Any]]:
    """Checks a request against the signature and runs it: the one way front ends call models.

    Raises FailedPreconditionError for an unknown signature,
    InvalidArgumentError for inputs that do not fit or an output_filter
    naming an unknown output, and InternalError if the servable breaks its
    contract (returns missing or extra outputs).
    """
    name, spec = resolve_signature(servable, signature_name)
    return call_resolved(servable, name, spec, inputs, output_filter)


async def call_signature_async(
    servable: Servable,
    signature_name: str | None,
    inputs: Tensors,
    output_filter: Iterable[str] | None = None,
) -> dict[str, npt.NDArray[Any]]:
    """:func:`call_signature` through :meth:`Servable.call_async` (for ASYNC signatures)."""
    name, spec = resolve_signature(servable, signature_name)
    return await call_resolved_async(servable, name, spec, inputs, output_filter)


def call_resolved(
    servable: Servable,
    name: str,
    spec: SignatureSpec,
    inputs: Tensors,
    output_filter: Iterable[str] | None = None,
) -> dict[str, npt.NDArray[Any]]:
    """:func:`call_signature` of a signature already resolved (``name``, ``spec``).

    Requires: ``(name, spec)`` came from :func:`resolve_signature` on this servable.
    """
    wanted = _prepare(spec, inputs, output_filter)
    return _checked_outputs(name, spec, wanted, servable.call(name, inputs, wanted))


def start_stream(
    servable: Servable,
    name: str,
    spec: SignatureSpec,
    inputs: Tensors,
    output_filter: Iterable[str] | None = None,
) -> tuple[Iterator[dict[str, Any]] | AsyncIterator[dict[str, Any]], frozenset[str] | None]:
    """Checks a request against a streaming signature and starts it: its parts, and the filter.

    The iterator is :meth:`Servable.call_stream_async`'s for ASYNC
    signatures, else :meth:`Servable.call_stream`'s; pass each part it
    gives to :func:`checked_part` with the returned filter.  Raises as
    :func:`call_resolved`, and FailedPreconditionError for a signature
    that does not stream.
    Requires: ``(name, spec)`` came from :func:`resolve_signature` on this servable.
    """
    if not spec.streaming:
        raise FailedPreconditionError(f"Signature '{name}' does not stream its answer")
    check_inputs(spec, inputs)
    wanted = _output_filter(spec, output_filter)
    if spec.execution_mode is ExecutionMode.ASYNC:
        return servable.call_stream_async(name, inputs, wanted), wanted
    return servable.call_stream(name, inputs, wanted), wanted


def checked_part(
    name: str, spec: SignatureSpec, wanted: frozenset[str] | None, part: object
) -> dict[str, npt.NDArray[Any]]:
    """A part of a stream :func:`start_stream` started, checked as :func:`call_resolved` checks.

    Raises InternalError if the servable breaks its contract (a part that
    is not a dict, or holds missing or extra outputs).
    """
    if type(part) is not dict:
        raise InternalError(f"Signature '{name}' gave a {type(part).__name__}, not a dict part")
    return _checked_outputs(name, spec, wanted, part)


async def call_resolved_async(
    servable: Servable,
    name: str,
    spec: SignatureSpec,
    inputs: Tensors,
    output_filter: Iterable[str] | None = None,
) -> dict[str, npt.NDArray[Any]]:
    """:func:`call_resolved` through :meth:`Servable.call_async` (for ASYNC signatures)."""
    wanted = _prepare(spec, inputs, output_filter)
    outputs = await servable.call_async(name, inputs, wanted)
    return _checked_outputs(name, spec, wanted, outputs)


@final
@attrs.frozen
class CallSite:
    """Which model, version and signature a call runs.  Immutable."""

    model_name: str
    version: int
    signature_name: str

    def __str__(self) -> str:
        return f"model {self.model_name} version {self.version} signature {self.signature_name}"


@final
class ModelCall:
    """One call of a signature on its way to where it runs: what, with what, until when.

    ``release`` is to be called once, when the model's own call has ended
    (at once if it never starts): it lets the version unload.  ``stages``
    takes the call's time marks.  Not thread-safe: one placement runs it.
    """

    __slots__ = (
        "deadline",
        "inputs",
        "output_filter",
        "release",
        "servable",
        "site",
        "spec",
        "stages",
    )

    def __init__(  # noqa: PLR0917 - the call's parts, made once per request
        self,
        site: CallSite,
        servable: Servable,
        spec: SignatureSpec,
        inputs: Tensors,
        output_filter: Iterable[str] | None,
        deadline: float | None,
        stages: CallStages,
        release: Callable[[], None],
    ) -> None:
        self.site = site
        self.servable = servable
        self.spec = spec
        self.inputs = inputs
        self.output_filter = output_filter
        self.deadline = deadline
        self.stages = stages
        self.release = release

    def run(self) -> dict[str, npt.NDArray[Any]]:
        """The model's call, here and now (its :meth:`Servable.call`), marking the stages."""
        return self.stages.call(
            self.servable, self.site.signature_name, self.spec, self.inputs, self.output_filter
        )

    async def run_async(self) -> dict[str, npt.NDArray[Any]]:
        """The model's coroutine (:meth:`Servable.call_async`) within the deadline, marking the
        stages (a batch queue marks its own, through :func:`call_stages`); releases the call."""
        stages = self.stages
        stages.started_ns = stages.infer_started_ns = perf_counter_ns()
        try:
            with stages_scope(stages):
                outputs = await within_deadline(
                    call_resolved_async(
                        self.servable,
                        self.site.signature_name,
                        self.spec,
                        self.inputs,
                        self.output_filter,
                    ),
                    self.deadline,
                )
        finally:
            self.release()
        if not stages.batch_size:
            stages.infer_ended_ns = stages.ended_ns = perf_counter_ns()
        return outputs


class Placement(abc.ABC):
    """Where the calls of a signature run: the event loop, a worker pool, a batch queue, ...

    The DataPlane asks the servable (:meth:`Servable.placement`) and
    otherwise places a call by its execution mode; either way it calls
    :meth:`run` from a coroutine on an event loop and :meth:`run_blocking`
    from a thread with none (a synchronous server's worker).
    Important: both call ``call.release()`` exactly once, when the model's
    call has ended or at once when it will not run; both fail with
    DeadlineExceededError once ``call.deadline`` has passed (the model's
    call may go on; ``release`` then waits for its end), and mark
    ``call.stages`` (queued, started, around the model's call, ended).
    Thread safety: called from many threads and event loops at once.
    """

    @abc.abstractmethod
    async def run(self, call: ModelCall) -> dict[str, npt.NDArray[Any]]:
        """Runs ``call`` for a coroutine on a running event loop; its outputs."""

    @abc.abstractmethod
    def run_blocking(self, call: ModelCall) -> dict[str, npt.NDArray[Any]]:
        """Runs ``call`` for a thread with no event loop, blocking it; its outputs."""

    def close(self) -> None:  # noqa: B027 - a placement holding nothing has nothing to close
        """Releases what the placement holds (its threads, what is queued: run or failed);
        the servable that made it calls it when it closes.  Nothing by default."""


def deadline_exceeded() -> DeadlineExceededError:
    """The error of a call whose deadline passed before the model answered."""
    return DeadlineExceededError("Deadline exceeded before the model answered")


async def within_deadline(awaitable: Awaitable[_T], deadline: float | None) -> _T:
    """``await awaitable``, failing with DeadlineExceededError once ``deadline`` passes
    (``time.monotonic()`` seconds; None: no bound); a coroutine cut off is closed."""
    if deadline is None:
        return await awaitable
    remaining = deadline - monotonic()
    try:
        if remaining <= 0:
            raise TimeoutError
        async with asyncio.timeout(remaining):
            return await awaitable
    except TimeoutError:
        if inspect.iscoroutine(awaitable):
            awaitable.close()
        raise deadline_exceeded() from None


async def answer_within(future: asyncio.Future[_T], deadline: float | None) -> _T:
    """``await future`` (one of the running loop's), which fails with DeadlineExceededError
    once ``deadline`` passes (``time.monotonic()`` seconds; None: no bound).

    :func:`within_deadline` for a future its waiter owns, on a request's path: a timer of the
    loop's own instead of ``asyncio.timeout`` (microseconds less), and the future itself takes
    the error, so whoever would answer it sees it done.  Cancelling the wait cancels it.
    """
    if deadline is None:
        return await future
    timer = future.get_loop().call_later(deadline - monotonic(), _expire, future)
    try:
        return await future
    finally:
        timer.cancel()


def _expire(future: asyncio.Future[Any]) -> None:
    if not future.done():
        future.set_exception(deadline_exceeded())


def _prepare(
    spec: SignatureSpec, inputs: Tensors, output_filter: Iterable[str] | None
) -> frozenset[str] | None:
    if spec.streaming:
        raise FailedPreconditionError(
            "The signature streams its answer in parts: call it as a stream (gRPC "
            "ModelStreamInfer, REST generate or generate_stream)"
        )
    check_inputs(spec, inputs)
    return _output_filter(spec, output_filter)


def _checked_outputs(
    name: str,
    spec: SignatureSpec,
    wanted: frozenset[str] | None,
    outputs: dict[str, npt.NDArray[Any]],
) -> dict[str, npt.NDArray[Any]]:
    expected = wanted if wanted is not None else spec.outputs.keys()
    if outputs.keys() != expected:
        raise InternalError(
            f"Signature '{name}' returned outputs {sorted(outputs)}, expected {sorted(expected)}"
        )
    return outputs


def _output_filter(
    spec: SignatureSpec, output_filter: Iterable[str] | None
) -> frozenset[str] | None:
    if output_filter is None:
        return None
    wanted = frozenset(output_filter)
    if not wanted:
        return None
    unknown = sorted(wanted - spec.outputs.keys())
    if unknown:
        raise InvalidArgumentError(
            f"Unknown output tensor '{unknown[0]}' in the output filter: the signature gives "
            f"{_names(spec.outputs)}"
        )
    return wanted


def _names(specs: Mapping[str, TensorSpec]) -> str:
    return "{" + ", ".join(sorted(specs)) + "}"
