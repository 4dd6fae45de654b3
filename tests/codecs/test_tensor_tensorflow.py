"""Tests that servinglib.codecs.tensor reads and writes TensorProtos exactly as TensorFlow does.

Imports TensorFlow (once for the test session): ``tf.make_tensor_proto`` and
``tf.make_ndarray`` (Python), ``tf.io.parse_tensor`` and ``tf.io.serialize_tensor`` (the C++
``Tensor::FromProto`` / ``AsProtoTensorContent`` that TF Serving runs).
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import numpy.typing as npt
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from tensorflow.core.framework import tensor_pb2 as tf_tensor_pb2
from tensorflow.core.framework import types_pb2 as tf_types_pb2

from servinglib.codecs.tensor import from_numpy, to_numpy
from servinglib.protos import tensor_pb2

ARRAYS = {
    "float32": np.arange(6, dtype=np.float32).reshape(2, 3) / 7,
    "float64-scalar": np.array(-1.25),
    "float16": np.array([[1.0, -np.inf], [np.nan, 65504.0]], np.float16),
    "bfloat16": np.array([1.0, -3.5, np.inf], ml_dtypes.bfloat16),
    "int8": np.array([-128, 127], np.int8),
    "int16": np.array([[-(2**15)], [2**15 - 1]], np.int16),
    "int32": np.array([-(2**31), 2**31 - 1], np.int32),
    "int64": np.array([-(2**63), 2**63 - 1], np.int64),
    "uint8": np.array([0, 255], np.uint8),
    "uint16": np.array([65535], np.uint16),
    "uint32": np.array([2**32 - 1], np.uint32),
    "uint64": np.array([2**64 - 1], np.uint64),
    "bool": np.array([[True, False, True]]),
    "complex64": np.array([1 + 2j, -3j], np.complex64),
    "complex128": np.array([[0.5 - 1j]], np.complex128),
    "string": np.array([[b"a", b""], [b"\x00\xff", b"long" * 10]], dtype=object),
    "string-scalar": np.array(b"scalar", dtype=object),
    "empty": np.zeros((0, 3), np.float32),
    "empty-string": np.zeros((2, 0), dtype=object),
}
TF_SUPPORTED_DTYPES = [
    np.dtype(name)
    for name in (
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "float32",
        "float64",
        "complex64",
        "complex128",
    )
]
SHAPES = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)


def as_ours(theirs: tf_tensor_pb2.TensorProto) -> tensor_pb2.TensorProto:
    """TensorFlow's proto, over the wire, parsed as ours."""
    return tensor_pb2.TensorProto.FromString(theirs.SerializeToString())


def as_theirs(ours: tensor_pb2.TensorProto) -> tf_tensor_pb2.TensorProto:
    """Our proto, over the wire, parsed as TensorFlow's."""
    return tf_tensor_pb2.TensorProto.FromString(ours.SerializeToString())


def parsed_by_tensorflow_cpp(ours: tensor_pb2.TensorProto) -> npt.NDArray[Any]:
    """Our proto decoded by TensorFlow's C++ Tensor::FromProto, the decoder TF Serving uses."""
    dtype = tf.dtypes.as_dtype(ours.dtype)
    value = tf.io.parse_tensor(ours.SerializeToString(), out_type=dtype).numpy()
    # A scalar string tensor's numpy() is a bare bytes object.
    return np.asarray(value, dtype=object if dtype == tf.string else None)


def assert_identical(actual: npt.NDArray[Any], expected: npt.NDArray[Any]) -> None:
    """Same dtype, shape and values; NaNs equal; float16/bfloat16 compared bit for bit."""
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    if expected.dtype.itemsize == 2 and expected.dtype.kind in "fV":
        np.testing.assert_array_equal(actual.view(np.uint16), expected.view(np.uint16))
    else:
        np.testing.assert_array_equal(actual, expected, strict=True)


@pytest.mark.parametrize("name", ARRAYS)
def test_our_decoding_of_tensorflows_protos_equals_make_ndarray(name: str) -> None:
    """to_numpy of tf.make_tensor_proto's proto (content or typed) equals tf.make_ndarray."""
    theirs = tf.make_tensor_proto(ARRAYS[name])

    assert_identical(to_numpy(as_ours(theirs)), tf.make_ndarray(theirs))


def tensorflow_proto(data_type: int, shape: list[int], **fields: Any) -> tf_tensor_pb2.TensorProto:
    """TensorFlow's TensorProto of ``data_type`` and ``shape`` with ``fields``."""
    proto = tf_tensor_pb2.TensorProto(dtype=data_type, **fields)
    proto.tensor_shape.SetInParent()
    for size in shape:
        proto.tensor_shape.dim.add(size=size)
    return proto


HAND_MADE = {
    "half-typed": tensorflow_proto(tf_types_pb2.DT_HALF, [3], half_val=[0x3C00, 0x7C00, 0xFE00]),
    "bfloat16-typed": tensorflow_proto(tf_types_pb2.DT_BFLOAT16, [2], half_val=[0x3F80, 0xC040]),
    "half-broadcast": tensorflow_proto(tf_types_pb2.DT_HALF, [2, 2], half_val=[0xC000]),
    "float-broadcast": tensorflow_proto(tf_types_pb2.DT_FLOAT, [2, 3], float_val=[7.5]),
    "int-padded": tensorflow_proto(tf_types_pb2.DT_INT32, [5], int_val=[1, 2, 3]),
    "int64-zeros": tensorflow_proto(tf_types_pb2.DT_INT64, [2, 2]),
    "uint8-typed": tensorflow_proto(tf_types_pb2.DT_UINT8, [3], int_val=[0, 128, 255]),
    "int16-broadcast": tensorflow_proto(tf_types_pb2.DT_INT16, [3], int_val=[-5]),
    "uint32-typed": tensorflow_proto(tf_types_pb2.DT_UINT32, [2], uint32_val=[1, 2**32 - 1]),
    "uint64-broadcast": tensorflow_proto(tf_types_pb2.DT_UINT64, [2], uint64_val=[2**64 - 1]),
    "bool-broadcast": tensorflow_proto(tf_types_pb2.DT_BOOL, [2, 2], bool_val=[True]),
    "bool-typed": tensorflow_proto(tf_types_pb2.DT_BOOL, [3], bool_val=[True, False, True]),
    "string-broadcast": tensorflow_proto(tf_types_pb2.DT_STRING, [3], string_val=[b"x"]),
    "string-padded": tensorflow_proto(tf_types_pb2.DT_STRING, [3], string_val=[b"a", b"b"]),
    "double-scalar": tensorflow_proto(tf_types_pb2.DT_DOUBLE, [], double_val=[2.5]),
    "complex-broadcast": tensorflow_proto(tf_types_pb2.DT_COMPLEX64, [2], scomplex_val=[1, -1]),
    "dcomplex-typed": tensorflow_proto(
        tf_types_pb2.DT_COMPLEX128, [2], dcomplex_val=[1.0, 2.0, 3.0, 4.0]
    ),
    "float-content": tensorflow_proto(
        tf_types_pb2.DT_FLOAT, [2], tensor_content=np.array([1.5, -2.0], "<f4").tobytes()
    ),
    "bool-content": tensorflow_proto(tf_types_pb2.DT_BOOL, [2], tensor_content=b"\x01\x00"),
    "empty-shape": tensorflow_proto(tf_types_pb2.DT_FLOAT, [0, 4]),
}


@pytest.mark.parametrize("name", HAND_MADE)
def test_our_decoding_of_typed_and_broadcast_protos_equals_make_ndarray(name: str) -> None:
    """Typed fields, half bit patterns, broadcast scalars, padding and zeros decode as TF does."""
    theirs = HAND_MADE[name]

    assert_identical(to_numpy(as_ours(theirs)), tf.make_ndarray(theirs))


@pytest.mark.parametrize("name", HAND_MADE)
def test_our_decoding_equals_tensorflows_cpp_decoder(name: str) -> None:
    """The same protos decode as TensorFlow's C++ Tensor::FromProto (TF Serving's decoder)."""
    ours = as_ours(HAND_MADE[name])

    assert_identical(to_numpy(ours), parsed_by_tensorflow_cpp(ours))


@pytest.mark.parametrize("name", ARRAYS)
@pytest.mark.parametrize("as_content", [False, True])
def test_tensorflow_decodes_our_protos_to_the_original(name: str, as_content: bool) -> None:
    """tf.make_ndarray and TF's C++ decoder both read from_numpy's protos back unchanged."""
    array = ARRAYS[name]
    ours = from_numpy(array, as_content=as_content)

    assert_identical(tf.make_ndarray(as_theirs(ours)), array)
    assert_identical(parsed_by_tensorflow_cpp(ours), array)


@pytest.mark.parametrize("name", ARRAYS)
def test_as_content_is_byte_identical_to_tensorflows_serializer(name: str) -> None:
    """from_numpy(as_content=True) writes the very bytes of tf.io.serialize_tensor."""
    array = ARRAYS[name]

    theirs = tf.io.serialize_tensor(tf.constant(array)).numpy()

    assert from_numpy(array, as_content=True).SerializeToString() == theirs


@settings(max_examples=60, deadline=None)
@given(
    array=hnp.arrays(st.sampled_from(TF_SUPPORTED_DTYPES), SHAPES),
    as_content=st.booleans(),
)
def test_any_array_survives_tensorflows_decoder(array: npt.NDArray[Any], as_content: bool) -> None:
    """For arrays of any dtype and shape, TF's C++ decoder reads our proto as the array."""
    decoded = parsed_by_tensorflow_cpp(from_numpy(array, as_content=as_content))

    assert_identical(decoded, array)
