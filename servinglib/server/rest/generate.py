"""The KServe / Triton generate extension: ``POST …/generate`` and ``…/generate_stream``."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from typing import Any, Final, final

import numpy as np
import numpy.typing as npt

from servinglib.errors import InvalidArgumentError, ServingError
from servinglib.servable import SignatureSpec, TensorSpec, find_signature
from servinglib.server.plane.data_plane import DataPlane
from servinglib.server.plane.streaming import InferenceStream
from servinglib.server.rest import json_codec
from servinglib.server.rest.exchange import BodyStream, RestRequest, RestResponse
from servinglib.server.rest.tensor_json import numbers_to_json, strings_to_json, to_array

EVENT_STREAM: Final = b"text/event-stream; charset=utf-8"


@final
class GenerateApi:
    """The generate extension's two endpoints over a DataPlane.  Thread-safe: stateless."""

    def __init__(self, plane: DataPlane) -> None:
        self._plane = plane

    async def generate(self, request: RestRequest) -> RestResponse:
        """``POST …/generate``: one JSON object (a stream's parts joined)."""
        await self._plane.loaded(request.model_spec(), deadline=request.deadline)
        stream = self._open(request)
        async with stream:
            parts = [part async for part in stream]
        outputs = parts[0] if len(parts) == 1 else join_parts(parts)
        return RestResponse(200, json_codec.dumps(_body(stream, outputs)))

    async def generate_stream(self, request: RestRequest) -> RestResponse:
        """``POST …/generate_stream``: server-sent events, one per part."""
        await self._plane.loaded(request.model_spec(), deadline=request.deadline)
        return RestResponse(
            200,
            b"",
            EVENT_STREAM,
            ((b"cache-control", b"no-cache"),),
            stream=_Events(self._open(request)),
        )

    def _open(self, request: RestRequest) -> InferenceStream:
        body = request.json_object()
        parameters = body.get("parameters", {})
        if not isinstance(parameters, dict):
            raise InvalidArgumentError("'parameters' must be a JSON object")
        signature_name = parameters.get("signature_name")
        if signature_name is not None and not isinstance(signature_name, str):
            raise InvalidArgumentError("Parameter 'signature_name' must be a string")
        spec, signatures = self._plane.signatures(request.model_spec())
        name, signature = find_signature(signatures, signature_name)
        inputs = _inputs(body, signature)
        return self._plane.open_stream(spec, name, inputs, deadline=request.deadline)


def _inputs(body: Mapping[str, Any], signature: SignatureSpec) -> dict[str, npt.NDArray[Any]]:
    inputs: dict[str, npt.NDArray[Any]] = {}
    for name, spec in signature.inputs.items():
        if name in body:
            inputs[name] = _shaped(to_array(body[name], spec.dtype, f"Input '{name}'"), spec)
    missing = sorted(signature.inputs.keys() - inputs.keys())
    if missing:
        raise InvalidArgumentError(
            f"The generate request has no input '{missing[0]}': the signature takes "
            + ", ".join(sorted(signature.inputs))
        )
    return inputs


def _shaped(array: npt.NDArray[Any], spec: TensorSpec) -> npt.NDArray[Any]:
    if spec.shape is not None and array.ndim < len(spec.shape):
        return array.reshape((1,) * (len(spec.shape) - array.ndim) + array.shape)
    return array


def _body(stream: InferenceStream, outputs: Mapping[str, npt.NDArray[Any]]) -> dict[str, Any]:
    body: dict[str, Any] = {"model_name": stream.model_name, "model_version": str(stream.version)}
    for name, value in outputs.items():
        body[name] = _value(value)
    return body


def _value(array: npt.NDArray[Any]) -> Any:  # noqa: ANN401 - a JSON value
    strings = array.dtype.kind == "O"
    if array.size == 1:  # one element: the value itself ("text_output": "...")
        array = array.reshape(-1)
        return strings_to_json(array, as_b64=False)[0] if strings else array[0].item()
    return strings_to_json(array, as_b64=False) if strings else numbers_to_json(array)


def join_parts(parts: list[dict[str, npt.NDArray[Any]]]) -> dict[str, npt.NDArray[Any]]:
    """A stream's parts as one answer (``generate``): see the module docstring.

    No parts: no outputs.  Parts whose tensors cannot be joined are an
    InvalidArgumentError naming the output.
    """
    if not parts:
        return {}
    joined: dict[str, npt.NDArray[Any]] = {}
    for name in parts[0]:
        values = [part[name] for part in parts]
        if values[0].dtype.kind == "O" and all(v.size == 1 for v in values):
            text = b"".join(_bytes(v.reshape(-1)[0]) for v in values)
            array = np.empty(values[0].shape, dtype=object)
            array.reshape(-1)[0] = text
            joined[name] = array
            continue
        try:
            if values[0].ndim == 0:
                joined[name] = np.stack(values)
            else:
                joined[name] = np.concatenate(values)
        except ValueError as error:
            raise InvalidArgumentError(
                f"Output '{name}': the parts cannot be joined into one answer ({error}); "
                "use generate_stream"
            ) from None
    return joined


def _bytes(item: object) -> bytes:
    return item if isinstance(item, bytes) else str(item).encode()


@final
class _Events(BodyStream):
    """A stream's parts as server-sent events; a failure as an error event that ends them."""

    def __init__(self, stream: InferenceStream) -> None:
        super().__init__()
        self._stream = stream

    async def chunks(self) -> AsyncGenerator[bytes, None]:
        async with self._stream as stream:
            try:
                async for outputs in stream:
                    # The parts made meanwhile go with it: one write for several events.
                    ready = [outputs, *stream.take_ready()]
                    yield b"".join(
                        b"data: " + json_codec.dumps(_body(stream, part)) + b"\n\n"
                        for part in ready
                    )
            except ServingError as error:
                self.code = error.code
                yield b"data: " + json_codec.dumps({"error": error.message}) + b"\n\n"

    async def aclose(self) -> None:
        await self._stream.aclose()
