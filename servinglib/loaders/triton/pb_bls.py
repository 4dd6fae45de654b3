"""BLS: a Triton Python model's ``InferenceRequest(...).exec()`` as a call through the server.

Each call goes through :func:`~servinglib.model_calls.model_caller`: the callee is a request of
the server's own (its batching, instances, statistics), bounded by the calling request's
deadline and by the BLS request's own ``timeout`` (the earlier of the two), its tensors'
arrays handed over as they are.  An error of the callee is the response's (``has_error()``),
its code the callee's (as Triton's Python backend gives it since its 2025 fix; Triton 2.51
still says INTERNAL).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any, final

import attrs
import numpy.typing as npt

from servinglib.errors import ServingError
from servinglib.loaders.triton.pb_types import InferenceResponse, Tensor, TritonError
from servinglib.model_calls import Outputs, model_caller
from servinglib.servable import deadline_scope, request_deadline


@attrs.frozen
class BlsCall:
    """What a BLS request asks: the callee's ``model_name`` and ``version`` (-1: the one it
    serves), its ``inputs``, the ``outputs`` wanted (none: all) and its ``timeout_us``
    (microseconds; 0: none).  Immutable, so thread-safe."""

    model_name: str
    version: int
    inputs: Sequence[Tensor]
    outputs: Sequence[str]
    timeout_us: int


def bls_call(call: BlsCall) -> InferenceResponse:
    """The callee's response, blocking this thread (``exec()``).

    A call with a ``timeout`` is awaited on an event loop of this thread's own: a blocking
    call runs the callee on this thread, where its timeout could not cut it off.
    """
    try:
        caller = model_caller()  # (outside a request: its error is the response's)
        with deadline_scope(_deadline(call)):
            if call.timeout_us > 0:
                answer = asyncio.run(
                    caller.call_async(call.model_name, _arrays(call), **_options(call))
                )
            else:
                answer = caller.call(call.model_name, _arrays(call), **_options(call))
    except ServingError as error:
        return _failed(error)
    return _response(answer)


async def bls_call_async(call: BlsCall) -> InferenceResponse:
    """The callee's response, awaited (``await async_exec()``)."""
    try:
        caller = model_caller()  # (outside a request: its error is the response's)
        with deadline_scope(_deadline(call)):
            answer = await caller.call_async(call.model_name, _arrays(call), **_options(call))
    except ServingError as error:
        return _failed(error)
    return _response(answer)


def bls_stream(call: BlsCall) -> Iterator[InferenceResponse]:
    """The callee's responses (``exec(decoupled=True)``), then an empty final one, as
    Triton's; an error ends them with a response carrying it."""
    deadline = _deadline(call)
    try:
        parts = model_caller().stream(call.model_name, _arrays(call), **_options(call))
        while (part := _next_within(parts, deadline)) is not None:
            yield _response(part)
    except ServingError as error:
        yield _failed(error)
        return
    yield InferenceResponse([])


async def bls_stream_async(call: BlsCall) -> ResponseIterator:
    """The callee's responses (``await async_exec(decoupled=True)``), read to the end without
    blocking the event loop, then an empty final one; an error ends them with a response
    carrying it."""
    with deadline_scope(_deadline(call)):
        return ResponseIterator(await _read(call))


@final
class ResponseIterator:
    """The responses ``await async_exec(decoupled=True)`` gives: iterated with ``for``, as
    Triton's README does, or ``async for``.  Not thread-safe (one reader)."""

    def __init__(self, responses: Sequence[InferenceResponse]) -> None:
        self._responses = iter(responses)

    def __iter__(self) -> Iterator[InferenceResponse]:
        return self

    def __next__(self) -> InferenceResponse:
        return next(self._responses)

    def __aiter__(self) -> AsyncIterator[InferenceResponse]:
        return self

    async def __anext__(self) -> InferenceResponse:
        try:
            return next(self._responses)
        except StopIteration:
            raise StopAsyncIteration from None

    def cancel(self) -> None:
        """Nothing to cancel: the callee's responses are all in (see :func:`bls_stream_async`)."""


async def _read(call: BlsCall) -> list[InferenceResponse]:
    responses: list[InferenceResponse] = []
    try:
        parts = model_caller().stream_async(call.model_name, _arrays(call), **_options(call))
        async for part in parts:
            responses.append(_response(part))
    except ServingError as error:
        return [*responses, _failed(error)]
    return [*responses, InferenceResponse([])]


def _deadline(call: BlsCall) -> float | None:
    """The earlier of the calling request's deadline and ``call``'s own timeout from now."""
    deadline = request_deadline()
    if call.timeout_us <= 0:
        return deadline
    own = time.monotonic() + call.timeout_us / 1e6
    return own if deadline is None else min(deadline, own)


def _next_within(parts: Iterator[Outputs], deadline: float | None) -> Outputs | None:
    """The next part of a blocking stream (None: no more), read under ``deadline``."""
    with deadline_scope(deadline):
        return next(parts, None)


def _arrays(call: BlsCall) -> dict[str, npt.NDArray[Any]]:
    return {tensor.name(): tensor.as_numpy() for tensor in call.inputs}


def _options(call: BlsCall) -> dict[str, Any]:
    version = None if call.version < 0 else call.version
    return {"version": version, "output_filter": list(call.outputs) or None}


def _response(outputs: Mapping[str, npt.NDArray[Any]]) -> InferenceResponse:
    return InferenceResponse([Tensor(name, value) for name, value in outputs.items()])


def _failed(error: ServingError) -> InferenceResponse:
    return InferenceResponse(error=TritonError.of_serving_error(error))
