"""BLS: a Triton Python model's ``InferenceRequest(...).exec()`` as a call through the server.

Each call goes through :func:`~servinglib.model_calls.model_caller`: the callee is a request of
the server's own (its batching, instances, statistics), bounded by the calling request's
deadline, its tensors' arrays handed over as they are.  An error of the callee is the
response's (``has_error()``), its code the callee's (as Triton's Python backend gives it since
its 2025 fix; Triton 2.51 still says INTERNAL).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy.typing as npt

from servinglib.errors import ServingError
from servinglib.loaders.triton.pb_types import InferenceResponse, Tensor, TritonError
from servinglib.model_calls import model_caller


def bls_call(
    model_name: str, version: int, inputs: Sequence[Tensor], outputs: Sequence[str]
) -> InferenceResponse:
    """The callee's response, blocking this thread (``exec()``)."""
    try:
        answer = model_caller().call(model_name, _arrays(inputs), **_options(version, outputs))
    except ServingError as error:
        return _failed(error)
    return _response(answer)


async def bls_call_async(
    model_name: str, version: int, inputs: Sequence[Tensor], outputs: Sequence[str]
) -> InferenceResponse:
    """The callee's response, awaited (``await async_exec()``)."""
    caller = model_caller()
    try:
        answer = await caller.call_async(model_name, _arrays(inputs), **_options(version, outputs))
    except ServingError as error:
        return _failed(error)
    return _response(answer)


def bls_stream(
    model_name: str, version: int, inputs: Sequence[Tensor], outputs: Sequence[str]
) -> Iterator[InferenceResponse]:
    """The callee's responses (``exec(decoupled=True)``), then an empty final one, as
    Triton's; an error ends them with a response carrying it."""
    try:
        parts = model_caller().stream(model_name, _arrays(inputs), **_options(version, outputs))
        for part in parts:
            yield _response(part)
    except ServingError as error:
        yield _failed(error)
        return
    yield InferenceResponse([])


def _arrays(inputs: Sequence[Tensor]) -> dict[str, npt.NDArray[Any]]:
    return {tensor.name(): tensor.as_numpy() for tensor in inputs}


def _options(version: int, outputs: Sequence[str]) -> dict[str, Any]:
    return {"version": None if version < 0 else version, "output_filter": list(outputs) or None}


def _response(outputs: Mapping[str, npt.NDArray[Any]]) -> InferenceResponse:
    return InferenceResponse([Tensor(name, value) for name, value in outputs.items()])


def _failed(error: ServingError) -> InferenceResponse:
    return InferenceResponse(error=TritonError.of_serving_error(error))
