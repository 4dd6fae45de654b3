"""PlaneCaller: a DataPlane's ModelCaller, the way a model calls another inside the server."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from typing import TYPE_CHECKING, final

from servinglib.errors import FailedPreconditionError, InvalidArgumentError
from servinglib.model_calls import ModelCaller, Outputs
from servinglib.servable import Tensors, request_deadline
from servinglib.server.model_spec import ModelSpec

if TYPE_CHECKING:
    from servinglib.server.plane.data_plane import DataPlane


@final
class PlaneCaller(ModelCaller):
    """Runs each call as ``plane`` runs a client's request (:meth:`DataPlane.infer`,
    :meth:`DataPlane.infer_blocking`, :meth:`DataPlane.open_stream`), the caller's deadline
    (:func:`~servinglib.servable.request_deadline`) its own; a blocking stream is read on
    ``helper_loop()``.  Thread-safe.
    """

    def __init__(
        self, plane: DataPlane, helper_loop: Callable[[], asyncio.AbstractEventLoop]
    ) -> None:
        self._plane = plane
        self._helper_loop = helper_loop

    def call(
        self,
        model_name: str,
        inputs: Tensors,
        *,
        version: int | None = None,
        label: str | None = None,
        signature_name: str | None = None,
        output_filter: Iterable[str] | None = None,
    ) -> Outputs:
        _refuse_on_event_loop()
        spec = _model_spec(model_name, version, label)
        deadline = request_deadline()
        result = self._plane.infer_blocking(
            spec, signature_name, inputs, output_filter, deadline=deadline
        )
        return result.outputs

    async def call_async(
        self,
        model_name: str,
        inputs: Tensors,
        *,
        version: int | None = None,
        label: str | None = None,
        signature_name: str | None = None,
        output_filter: Iterable[str] | None = None,
    ) -> Outputs:
        spec = _model_spec(model_name, version, label)
        deadline = request_deadline()
        result = await self._plane.infer(
            spec, signature_name, inputs, output_filter, deadline=deadline
        )
        return result.outputs

    def stream(
        self,
        model_name: str,
        inputs: Tensors,
        *,
        version: int | None = None,
        label: str | None = None,
        signature_name: str | None = None,
        output_filter: Iterable[str] | None = None,
    ) -> Iterator[Outputs]:
        _refuse_on_event_loop()
        parts = self.stream_async(
            model_name,
            inputs,
            version=version,
            label=label,
            signature_name=signature_name,
            output_filter=output_filter,
        )
        return _blocking(parts, self._helper_loop())

    async def stream_async(
        self,
        model_name: str,
        inputs: Tensors,
        *,
        version: int | None = None,
        label: str | None = None,
        signature_name: str | None = None,
        output_filter: Iterable[str] | None = None,
    ) -> AsyncIterator[Outputs]:
        spec = _model_spec(model_name, version, label)
        deadline = request_deadline()
        stream = self._plane.open_stream(
            spec, signature_name, inputs, output_filter, deadline=deadline
        )
        async with stream:
            async for part in stream:
                yield part


def _blocking(parts: AsyncIterator[Outputs], loop: asyncio.AbstractEventLoop) -> Iterator[Outputs]:
    """``parts`` read on ``loop`` for this thread, closed (on the loop) however it ends."""
    try:
        while True:
            try:
                yield asyncio.run_coroutine_threadsafe(_next(parts), loop).result()
            except StopAsyncIteration:
                return
    finally:
        close = getattr(parts, "aclose", None)
        if close is not None:
            asyncio.run_coroutine_threadsafe(close(), loop).result()


async def _next(parts: AsyncIterator[Outputs]) -> Outputs:
    return await anext(parts)


@functools.lru_cache(maxsize=1024)  # (a ModelSpec is immutable: steps and BLS calls share one)
def _model_spec(model_name: str, version: int | None, label: str | None) -> ModelSpec:
    try:
        return ModelSpec(model_name, version, label)
    except (TypeError, ValueError) as error:
        raise InvalidArgumentError(f"A call of model {model_name!r:.200}: {error}") from None


def _refuse_on_event_loop() -> None:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise FailedPreconditionError(
        "A model running on an event loop calls other models with call_async (a blocking "
        "call there would stall every request of the loop)"
    )
