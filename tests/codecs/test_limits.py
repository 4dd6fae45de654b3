"""Decode limits: shapes checked and fills bounded before what a shape claims is allocated."""

from __future__ import annotations

import json
import struct
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servinglib.codecs.limits import DecodeLimits, element_count
from servinglib.codecs.tensor import to_numpy
from servinglib.codecs.v2_raw import decode_raw
from servinglib.errors import InvalidArgumentError
from servinglib.protos import grpc_service_pb2, predict_pb2, tensor_pb2
from servinglib.server.grpc._convert import tensors_of
from servinglib.server.grpc._v2_tensors import decode_inputs
from servinglib.server.rest.kserve_v2 import _inputs

# The shapes of the bombs, and dimensions around the limits.
BOMB_SHAPES = [[-1], [2**40], [2**62], [2**32, 2**32], [2**26], [2**27], [0, 2**63 - 1]]
DIMENSIONS = st.one_of(
    st.integers(0, 4),
    st.sampled_from([-1, 2**20, 2**26, 2**27, 2**31, 2**32, 2**40, 2**62, 2**63 - 1]),
)
SHAPES = st.lists(DIMENSIONS, max_size=4)
# What a rejected request may cost beyond its body: the exception, its message, small arrays.
OVERHEAD_BYTES = 64 << 10
BODY_MULTIPLE = 8


@contextmanager
def peak_allocated() -> Iterator[list[int]]:
    """Measures the peak of memory allocated inside the block (numpy's buffers included)."""
    peak = [0]
    tracemalloc.start()
    try:
        yield peak
    finally:
        peak[0] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()


def decode_bounded(decode: Callable[[], Any], body_bytes: int) -> None:
    """Runs ``decode``: it decodes, or it raises InvalidArgumentError having allocated little."""
    with peak_allocated() as peak:
        try:
            decode()
        except InvalidArgumentError:
            rejected = True
        else:
            rejected = False
    if rejected:
        assert peak[0] <= OVERHEAD_BYTES + BODY_MULTIPLE * body_bytes, (peak[0], body_bytes)


def float_proto(shape: list[int], values: list[float]) -> tensor_pb2.TensorProto:
    proto = tensor_pb2.TensorProto(dtype=tensor_pb2.DT_FLOAT, float_val=values)
    for size in shape:
        proto.tensor_shape.dim.add(size=size)
    return proto


@pytest.mark.parametrize("shape", [*BOMB_SHAPES[:4], [0, 2**63 - 1]])
def test_shapes_past_the_element_cap_are_invalid_arguments_naming_the_shape(
    shape: list[int],
) -> None:
    """Negative dims, 2^40, 2^62 and [2^32, 2^32] are refused with the tensor and shape named."""
    with pytest.raises(InvalidArgumentError, match=r"Input tensor 'x'.*shape \[") as error:
        element_count(shape, "Input tensor 'x'")
    assert str(shape[-1]) in error.value.message


def test_more_dimensions_than_tensorflow_allows_are_refused() -> None:
    """A shape of 255 dimensions is refused as TensorFlow refuses it."""
    with pytest.raises(InvalidArgumentError, match="255 dimensions"):
        element_count([1] * 255, "Input tensor 'x'")


@pytest.mark.parametrize("shape", BOMB_SHAPES)
@pytest.mark.parametrize("data_type", [tensor_pb2.DT_FLOAT, tensor_pb2.DT_STRING])
def test_tensor_proto_bombs_are_invalid_arguments_without_allocating(
    shape: list[int], data_type: int
) -> None:
    """A proto declaring a huge shape with one value or none is refused, costing ~its own size."""
    for values in ([], [1]):
        proto = tensor_pb2.TensorProto(dtype=data_type)
        if data_type == tensor_pb2.DT_STRING:
            proto.string_val.extend([b"s"] * len(values))
        else:
            proto.float_val.extend(values)
        for size in shape:
            proto.tensor_shape.dim.add(size=size)
        with peak_allocated() as peak, pytest.raises(InvalidArgumentError, match="shape"):
            to_numpy(proto)
        assert peak[0] < OVERHEAD_BYTES


def test_a_fill_within_the_budget_decodes_as_tensorflow() -> None:
    """One value fills an image-sized tensor (tf.make_tensor_proto(0.5, shape=...)) as in TF."""
    array = to_numpy(float_proto([1, 224, 224, 3], [0.5]))
    assert array.shape == (1, 224, 224, 3)
    assert (array == 0.5).all()


def test_a_fill_is_bounded_by_the_bytes_that_carry_it() -> None:
    """With a ratio of 16, a fill may create 16 bytes per byte of the tensors sent, no more."""
    limits = DecodeLimits(fill_ratio=16)
    proto = float_proto([2], [1.0])
    proto.tensor_shape.dim[0].size = proto.ByteSize() * 16 // 4
    assert to_numpy(proto, limits=limits).size == proto.tensor_shape.dim[0].size
    proto.tensor_shape.dim[0].size += 4
    with pytest.raises(InvalidArgumentError, match="filled"):
        to_numpy(proto, limits=limits)


def test_the_tensors_of_one_request_share_one_fill_budget() -> None:
    """Two fills each within the cap but over it together are refused, naming the second."""
    request = predict_pb2.PredictRequest()
    request.inputs["a"].CopyFrom(float_proto([3000], [1.0]))
    request.inputs["b"].CopyFrom(float_proto([3000], [1.0]))
    limits = DecodeLimits(max_fill_bytes=20_000)
    with pytest.raises(InvalidArgumentError, match=r"Input tensor '(a|b)'.*may fill 8000 bytes"):
        tensors_of(request.inputs, limits)
    assert tensors_of(request.inputs, DecodeLimits(max_fill_bytes=24_000))["b"].shape == (3000,)


def test_the_fill_cap_holds_whatever_the_ratio() -> None:
    """max_fill_bytes bounds a fill even when the ratio would allow more."""
    with pytest.raises(InvalidArgumentError, match="filled to 4000 bytes"):
        to_numpy(float_proto([1000], [1.0]), limits=DecodeLimits(max_fill_bytes=3999))


@pytest.mark.parametrize("shape", BOMB_SHAPES)
def test_v2_bytes_bombs_are_refused_before_the_array_is_made(shape: list[int]) -> None:
    """BYTES of shape [2^27] with no data (the 248-byte REST bomb) is refused at once."""
    with peak_allocated() as peak, pytest.raises(InvalidArgumentError, match="Input tensor 'x'"):
        decode_raw("BYTES", tuple(shape), b"", name="x")
    assert peak[0] < OVERHEAD_BYTES


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data_type=st.sampled_from(
        [tensor_pb2.DT_FLOAT, tensor_pb2.DT_STRING, tensor_pb2.DT_INT8, tensor_pb2.DT_DOUBLE]
    ),
    shape=SHAPES,
    values=st.integers(0, 8),
    content=st.binary(max_size=64),
)
def test_tensor_protos_decode_or_are_refused_cheaply(
    data_type: int, shape: list[int], values: int, content: bytes
) -> None:
    """Random TensorProtos decode, or are refused having allocated a few times their size."""
    proto = tensor_pb2.TensorProto(dtype=data_type, tensor_content=content)
    if data_type == tensor_pb2.DT_STRING:
        proto.string_val.extend([b"v"] * values)
    elif data_type == tensor_pb2.DT_INT8:
        proto.int_val.extend(range(values))
    else:
        getattr(proto, "float_val" if data_type == tensor_pb2.DT_FLOAT else "double_val").extend(
            [0.5] * values
        )
    for size in shape:
        proto.tensor_shape.dim.add(size=size)
    request = predict_pb2.PredictRequest()
    request.inputs["x"].CopyFrom(proto)
    decode_bounded(lambda: tensors_of(request.inputs), request.ByteSize())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    datatype=st.sampled_from(["BYTES", "FP32", "INT64", "BOOL", "FP16"]),
    shape=SHAPES,
    body=st.binary(max_size=64),
    typed=st.integers(0, 8),
    raw=st.booleans(),
)
def test_v2_grpc_tensors_decode_or_are_refused_cheaply(
    datatype: str, shape: list[int], body: bytes, typed: int, raw: bool
) -> None:
    """Random V2 gRPC inputs (raw or typed) decode, or are refused having allocated little."""
    request = grpc_service_pb2.ModelInferRequest(model_name="m")
    tensor = request.inputs.add(name="x", datatype=datatype, shape=shape)
    if raw:
        request.raw_input_contents.append(body)
    elif datatype == "BYTES":
        tensor.contents.bytes_contents.extend([b"b"] * typed)
    elif datatype == "FP32":
        tensor.contents.fp32_contents.extend([1.0] * typed)
    elif datatype == "INT64":
        tensor.contents.int64_contents.extend(range(typed))
    elif datatype == "BOOL":
        tensor.contents.bool_contents.extend([True] * typed)
    decode_bounded(lambda: decode_inputs(request), request.ByteSize())


def bytes_elements(count: int) -> bytes:
    return b"".join(struct.pack("<I", 1) + b"e" for _ in range(count))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    datatype=st.sampled_from(["BYTES", "FP32", "INT32", "BOOL"]),
    shape=SHAPES,
    data=st.one_of(
        st.none(),
        st.lists(st.integers(0, 3), max_size=8),
        st.lists(st.text(max_size=3), max_size=8),
    ),
    binary=st.one_of(st.none(), st.binary(max_size=64), st.integers(0, 8).map(bytes_elements)),
)
def test_v2_rest_inputs_decode_or_are_refused_cheaply(
    datatype: str, shape: list[int], data: list[Any] | None, binary: bytes | None
) -> None:
    """Random V2 REST inputs (JSON data or binary extension) decode, or are refused cheaply."""
    item: dict[str, Any] = {"name": "x", "datatype": datatype, "shape": shape}
    if binary is not None:
        item["parameters"] = {"binary_data_size": len(binary)}
    elif data is not None:
        item["data"] = data
    header = json.dumps({"inputs": [item]}).encode()
    body_bytes = len(header) + len(binary or b"")
    decode_bounded(lambda: _inputs([item], memoryview(binary or b""), DecodeLimits()), body_bytes)


def test_a_decoded_tensor_from_the_binary_extension_is_what_was_sent() -> None:
    """The checks leave valid BYTES alone: three elements come back as sent."""
    decoded = decode_raw("BYTES", (3,), bytes_elements(3), name="x")
    assert decoded.tolist() == [b"e", b"e", b"e"]
    assert np.asarray(decoded).dtype == object


def test_trusted_limits_fill_as_tensorflow_does() -> None:
    """DecodeLimits.trusted() (warmup records) fills 64 MiB from one value, past the default cap."""
    proto = float_proto([16 << 20], [2.0])
    with pytest.raises(InvalidArgumentError, match="filled"):
        to_numpy(proto)
    filled = to_numpy(proto, limits=DecodeLimits.trusted())
    assert filled.shape == (16 << 20,)
    assert filled[-1] == 2.0
