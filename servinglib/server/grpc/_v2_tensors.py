"""KServe V2 gRPC tensors ⇄ numpy: typed ``contents`` and raw contents (``codecs.v2_raw``)."""

from __future__ import annotations

from typing import Any, Final

import numpy as np
import numpy.typing as npt

from servinglib.codecs.dtypes import v2_datatype_to_numpy
from servinglib.codecs.limits import DEFAULT_LIMITS, DecodeLimits, element_count
from servinglib.codecs.v2_raw import decode_raw, encode_raw
from servinglib.errors import InvalidArgumentError
from servinglib.protos import grpc_service_pb2

# The typed field of each datatype; FP16 and BF16 have none (they travel as raw contents).
_FIELD: Final[dict[str, str]] = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}
# The numpy type a typed field holds, for the fields wider than some of their datatypes.
_FIELD_DTYPE: Final[dict[str, np.dtype[Any]]] = {
    "int_contents": np.dtype(np.int32),
    "uint_contents": np.dtype(np.uint32),
}

InputTensor = grpc_service_pb2.ModelInferRequest.InferInputTensor


def decode_inputs(
    request: grpc_service_pb2.ModelInferRequest, limits: DecodeLimits = DEFAULT_LIMITS
) -> dict[str, npt.NDArray[Any]]:
    """The request's input tensors by name, from raw contents or typed contents.

    Raises InvalidArgumentError naming the tensor for an unknown datatype, a
    negative dimension, a shape over ``limits``, values (or bytes) that do not
    match datatype x shape (checked before any allocation),
    a duplicate name, a datatype with no typed field sent typed, and for a
    request mixing raw and typed contents or with a raw entry per input
    missing or extra.
    """
    raw = request.raw_input_contents
    inputs: dict[str, npt.NDArray[Any]] = {}
    if raw:
        if len(raw) != len(request.inputs):
            raise InvalidArgumentError(
                f"The request has {len(raw)} raw_input_contents for {len(request.inputs)} inputs;"
                " raw contents need one entry per input, in order"
            )
        for tensor, data in zip(request.inputs, raw, strict=True):
            if tensor.HasField("contents"):
                raise InvalidArgumentError(
                    f"Input tensor '{tensor.name}' has contents, but the request uses "
                    "raw_input_contents: send every input one way"
                )
            _add(
                inputs,
                tensor.name,
                decode_raw(
                    tensor.datatype, tuple(tensor.shape), data, name=tensor.name, limits=limits
                ),
            )
        return inputs
    for tensor in request.inputs:
        _add(inputs, tensor.name, _decode_typed(tensor, limits))
    return inputs


def _add(inputs: dict[str, npt.NDArray[Any]], name: str, value: npt.NDArray[Any]) -> None:
    if name in inputs:
        raise InvalidArgumentError(f"Input tensor '{name}' is given twice")
    inputs[name] = value


def _decode_typed(tensor: InputTensor, limits: DecodeLimits) -> npt.NDArray[Any]:
    name, datatype = tensor.name, tensor.datatype
    dtype = _dtype(name, datatype)
    shape = tuple(tensor.shape)
    count = element_count(shape, lambda: f"Input tensor '{name}'", limits)
    field = _FIELD.get(datatype)
    if field is None:
        raise InvalidArgumentError(
            f"Input tensor '{name}' of datatype {datatype} has no typed contents field; "
            "send it in raw_input_contents"
        )
    values = getattr(tensor.contents, field)
    if len(values) != count:
        raise InvalidArgumentError(
            f"Input tensor '{name}' has {len(values)} values in contents.{field}, but "
            f"{datatype} {list(shape)} needs {count}"
        )
    if datatype == "BYTES":
        array = np.empty(count, dtype=object)
        array[:] = list(values)
        return array.reshape(shape)
    wide = _FIELD_DTYPE.get(field, dtype)
    array = np.fromiter(values, dtype=wide, count=count)
    if wide != dtype:
        info = np.iinfo(dtype)
        outside = (array < info.min) | (array > info.max)
        if outside.any():
            raise InvalidArgumentError(
                f"Input tensor '{name}' holds {int(array[outside][0])}, outside {datatype}'s "
                f"range [{info.min}, {info.max}]"
            )
        array = array.astype(dtype)
    return array.reshape(shape)


def _dtype(name: str, datatype: str) -> np.dtype[Any]:
    try:
        return v2_datatype_to_numpy(datatype)
    except InvalidArgumentError as error:
        raise InvalidArgumentError(f"Input tensor '{name}': {error.message}") from None


def encode_outputs(
    outputs: dict[str, npt.NDArray[Any]], response: grpc_service_pb2.ModelInferResponse
) -> None:
    """Adds each output to ``response``, its values in ``raw_output_contents`` (in order).

    Always raw, as Triton answers: tritonclient reads typed output contents
    only for BYTES, and raw contents cost no per-element conversion.
    """
    for name, value in outputs.items():
        datatype, data = encode_raw(value)
        response.outputs.add(name=name, datatype=datatype, shape=value.shape)
        response.raw_output_contents.append(data)
