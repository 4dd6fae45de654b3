"""Python models' streaming signatures: declared by generators, called as streams only."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

from servinglib.errors import FailedPreconditionError, InternalError, InvalidArgumentError
from servinglib.loaders import PythonModel, signature
from servinglib.loaders.python import PythonServable
from servinglib.servable import (
    ExecutionMode,
    TensorSpec,
    call_signature,
    checked_part,
    resolve_signature,
    start_stream,
)

X = [TensorSpec("x", "float32", [-1])]
Y = [TensorSpec("y", "float32", [-1])]


class Streaming(PythonModel):
    @signature(name="serving_default", inputs=X, outputs=Y)
    def parts(self, x: Any) -> Any:
        for k in range(3):
            yield {"y": x + k}  # a float64 sum: converted to the declared float32

    @signature(inputs=X, outputs=Y)
    def broken(self, x: Any) -> Any:
        yield {"y": x}
        raise RuntimeError("model bug")

    @signature(inputs=X, outputs=Y)
    def wrong(self, x: Any) -> Any:
        yield {"z": x}

    @signature(inputs=X, outputs=Y, execution_mode=ExecutionMode.ASYNC)
    async def aparts(self, x: Any) -> Any:
        for k in range(2):
            yield {"y": x * k}


X1 = {"x": np.array([1.0], np.float32)}


def test_a_generator_method_is_a_streaming_signature() -> None:
    """Generators and async generators declare streaming signatures; plain methods do not."""
    servable = PythonServable(Streaming())
    assert {n: s.streaming for n, s in servable.signatures.items()} == {
        "serving_default": True,
        "broken": True,
        "wrong": True,
        "aparts": True,
    }


def test_a_stream_gives_checked_parts_in_declared_dtypes() -> None:
    """start_stream runs a generator's parts; each part holds the declared dtype."""
    servable = PythonServable(Streaming())
    name, spec = resolve_signature(servable, None)
    parts, wanted = start_stream(servable, name, spec, X1)
    got = [checked_part(name, spec, wanted, part) for part in parts]  # type: ignore[union-attr]
    assert [p["y"].tolist() for p in got] == [[1.0], [2.0], [3.0]]
    assert {p["y"].dtype for p in got} == {np.dtype(np.float32)}


def test_an_async_generator_streams_through_call_stream_async() -> None:
    """An ASYNC streaming signature is an async iterator of parts."""
    servable = PythonServable(Streaming())
    name, spec = resolve_signature(servable, "aparts")

    async def read() -> list[list[float]]:
        parts, _ = start_stream(servable, name, spec, X1)
        return [part["y"].tolist() async for part in parts]  # type: ignore[union-attr]

    assert asyncio.run(read()) == [[0.0], [1.0]]


def test_a_model_error_mid_stream_is_wrapped_naming_the_signature() -> None:
    """A generator that raises after a part: the part, then an error naming the signature."""
    servable = PythonServable(Streaming())
    parts = servable.call_stream("broken", X1)
    assert next(parts)["y"].tolist() == [1.0]
    with pytest.raises(Exception, match="Signature 'broken' failed"):
        next(parts)


def test_a_part_missing_an_output_is_an_internal_error() -> None:
    """A part without the declared outputs breaks the contract: INTERNAL, naming the output."""
    servable = PythonServable(Streaming())
    with pytest.raises(InternalError, match="'y'"):
        next(servable.call_stream("wrong", X1))


def test_a_streaming_signature_refuses_a_whole_call() -> None:
    """call_signature on a streaming signature is FAILED_PRECONDITION."""
    with pytest.raises(FailedPreconditionError, match="streams its answer"):
        call_signature(PythonServable(Streaming()), None, X1)


def test_an_async_generator_needs_async_mode() -> None:
    """An async generator declared THREAD is refused at load, as coroutines are."""

    class Wrong(PythonModel):
        @signature(name="serving_default", inputs=X, outputs=Y)
        async def parts(self, x: Any) -> Any:
            yield {"y": x}

    with pytest.raises(InvalidArgumentError, match="ASYNC"):
        PythonServable(Wrong())
