"""Tests for servinglib.codecs.tensor: TensorProto ⇄ numpy, without TensorFlow."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from servinglib.codecs.tensor import fill_proto, from_numpy, to_numpy
from servinglib.errors import InvalidArgumentError
from servinglib.protos import tensor_pb2

NUMERIC_DTYPES = [
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
        ">f4",  # big-endian input: encoded little-endian, decoded native
        ">i8",
        ">c16",
    )
]
SHAPES = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)


@st.composite
def numeric_arrays(draw: st.DrawFn) -> npt.NDArray[Any]:
    """Arrays of every numeric dtype (bfloat16 too) and of shapes from scalar to rank 3, empty."""
    if draw(st.booleans()):
        # bfloat16 from arbitrary 16-bit patterns (NaNs and infinities included).
        bits = draw(hnp.arrays(np.uint16, SHAPES))
        return bits.view(ml_dtypes.bfloat16)
    return draw(hnp.arrays(st.sampled_from(NUMERIC_DTYPES), SHAPES))


def string_arrays() -> st.SearchStrategy[npt.NDArray[Any]]:
    """Object arrays of bytes, of shapes from scalar to rank 3, empty included."""
    return hnp.arrays(object, SHAPES, elements=st.binary(max_size=6), fill=st.just(b""))


def reparsed(proto: tensor_pb2.TensorProto) -> tensor_pb2.TensorProto:
    """``proto`` after a trip over the wire."""
    return tensor_pb2.TensorProto.FromString(proto.SerializeToString())


def assert_same(actual: npt.NDArray[Any], expected: npt.NDArray[Any]) -> None:
    """Same shape, same native dtype, same values (NaNs equal; strings compared as bytes)."""
    assert actual.shape == expected.shape
    if expected.dtype.kind in "OSU":
        assert actual.dtype == object
        assert actual.tolist() == np.vectorize(_as_bytes, otypes=[object])(expected).tolist()
        return
    assert actual.dtype == expected.dtype.newbyteorder("=")
    if expected.dtype.itemsize == 2 and expected.dtype.kind in "fV":
        # float16 and bfloat16 travel as bit patterns: every bit survives, NaN payloads too.
        np.testing.assert_array_equal(actual.view(np.uint16), expected.view(np.uint16))
        return
    if expected.dtype.kind in "fc":
        # NaNs compare equal: a NaN's payload may change on its trip through a Python float.
        np.testing.assert_array_equal(actual.astype(expected.dtype), expected, strict=True)
        return
    np.testing.assert_array_equal(actual, expected, strict=False)


def _as_bytes(value: object) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


# -- round trips --------------------------------------------------------------------------


@given(array=numeric_arrays(), as_content=st.booleans())
def test_numeric_round_trip(array: npt.NDArray[Any], as_content: bool) -> None:
    """numpy → TensorProto → wire → numpy gives the same array for every dtype and shape."""
    assert_same(to_numpy(reparsed(from_numpy(array, as_content=as_content))), array)


@given(array=string_arrays(), as_content=st.booleans())
def test_string_round_trip(array: npt.NDArray[Any], as_content: bool) -> None:
    """Object arrays of bytes round-trip through string_val, whatever as_content says."""
    proto = from_numpy(array, as_content=as_content)

    assert not proto.tensor_content
    assert_same(to_numpy(reparsed(proto)), array)


@given(
    array=hnp.arrays(
        np.dtype("<U4"),
        SHAPES,
        # Encodable text only (no lone surrogates); numpy strips trailing NULs.
        elements=st.text(
            st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=4
        ),
    )
)
def test_unicode_arrays_encode_as_utf8(array: npt.NDArray[Any]) -> None:
    """A numpy str array becomes DT_STRING of UTF-8 bytes."""
    proto = from_numpy(array)

    assert proto.dtype == tensor_pb2.DT_STRING
    assert_same(to_numpy(reparsed(proto)), array)


def test_a_lone_surrogate_is_an_invalid_argument() -> None:
    """A str element UTF-8 cannot encode (a lone surrogate) is INVALID_ARGUMENT, naming it."""
    with pytest.raises(InvalidArgumentError, match="element 1 is not valid Unicode"):
        from_numpy(np.array(["ok", "\ud800"]))


def test_object_array_of_str_and_bytes_encodes_both() -> None:
    """An object array may mix bytes and str; str elements are UTF-8 encoded."""
    proto = from_numpy(np.array([b"\xff", "é"], dtype=object))

    assert list(proto.string_val) == [b"\xff", "é".encode()]


def test_non_string_element_in_object_array_is_rejected() -> None:
    """An object array element that is neither bytes nor str raises, naming its index."""
    with pytest.raises(InvalidArgumentError, match="element 1 is a int"):
        from_numpy(np.array([b"a", 3], dtype=object))


def test_python_lists_and_scalars_are_accepted() -> None:
    """from_numpy takes anything numpy.asarray does: lists, floats, bytes."""
    assert_same(to_numpy(from_numpy([[1.5, 2.5]])), np.array([[1.5, 2.5]]))
    assert_same(to_numpy(from_numpy(7)), np.array(7))
    assert_same(to_numpy(from_numpy(b"abc")), np.array(b"abc", dtype=object))


def test_unsupported_numpy_dtype_is_rejected() -> None:
    """An array TensorFlow has no type for (datetime64) raises InvalidArgumentError."""
    with pytest.raises(InvalidArgumentError, match="datetime64"):
        from_numpy(np.array(["2024-01-01"], dtype="M8[D]"))


# -- the fields from_numpy writes ---------------------------------------------------------


@pytest.mark.parametrize(
    ("array", "field", "values"),
    [
        (np.array([1.5], np.float32), "float_val", [1.5]),
        (np.array([1.5], np.float64), "double_val", [1.5]),
        (np.array([-1], np.int8), "int_val", [-1]),
        (np.array([65535], np.uint16), "int_val", [65535]),
        (np.array([-(2**63)], np.int64), "int64_val", [-(2**63)]),
        (np.array([2**32 - 1], np.uint32), "uint32_val", [2**32 - 1]),
        (np.array([2**64 - 1], np.uint64), "uint64_val", [2**64 - 1]),
        (np.array([True, False]), "bool_val", [True, False]),
        (np.array([1.0, -2.0], np.float16), "half_val", [0x3C00, 0xC000]),
        (np.array([1.0], ml_dtypes.bfloat16), "half_val", [0x3F80]),
        (np.array([1 + 2j], np.complex64), "scomplex_val", [1.0, 2.0]),
        (np.array([3 - 4j], ">c16"), "dcomplex_val", [3.0, -4.0]),
        (np.array([b"x"], object), "string_val", [b"x"]),
    ],
)
def test_typed_fields_as_tf_serving_writes_them(
    array: npt.NDArray[Any], field: str, values: list[object]
) -> None:
    """By default each dtype's values go to the typed field TF Serving's responses use."""
    proto = from_numpy(array)

    assert list(getattr(proto, field)) == values
    assert not proto.tensor_content


def test_shape_is_written_even_for_a_scalar() -> None:
    """A scalar's proto has a present, empty tensor_shape, as TensorFlow writes it."""
    proto = from_numpy(np.float32(2.0))

    assert proto.HasField("tensor_shape")
    assert list(proto.tensor_shape.dim) == []


def test_as_content_writes_little_endian_row_major_bytes() -> None:
    """as_content writes C-order little-endian bytes, even from a transposed big-endian view."""
    array = np.arange(6, dtype=">i4").reshape(2, 3).T

    proto = from_numpy(array, as_content=True)

    assert proto.tensor_content == np.ascontiguousarray(array, dtype="<i4").tobytes()
    assert [dim.size for dim in proto.tensor_shape.dim] == [3, 2]


def test_content_decodes_to_a_read_only_view() -> None:
    """to_numpy of tensor_content is a read-only zero-copy view; typed values are writable."""
    from_content = to_numpy(from_numpy(np.arange(4.0), as_content=True))
    from_typed = to_numpy(from_numpy(np.arange(4.0)))

    assert not from_content.flags.writeable
    assert not from_content.flags.owndata
    assert from_typed.flags.writeable


# -- TensorFlow's filling rules -----------------------------------------------------------


def proto_of(data_type: int, shape: list[int], **fields: Any) -> tensor_pb2.TensorProto:
    """A TensorProto of ``data_type`` and ``shape`` with ``fields`` set."""
    proto = tensor_pb2.TensorProto(dtype=data_type, **fields)
    proto.tensor_shape.SetInParent()
    for size in shape:
        proto.tensor_shape.dim.add(size=size)
    return proto


@pytest.mark.parametrize(
    ("proto", "expected"),
    [
        (proto_of(tensor_pb2.DT_FLOAT, [2, 3], float_val=[7.0]), np.full((2, 3), 7.0, np.float32)),
        (proto_of(tensor_pb2.DT_INT32, [4], int_val=[1, 2]), np.array([1, 2, 2, 2], np.int32)),
        (proto_of(tensor_pb2.DT_BOOL, [2, 2]), np.zeros((2, 2), bool)),
        (proto_of(tensor_pb2.DT_STRING, [3], string_val=[b"s"]), np.array([b"s"] * 3, object)),
        (proto_of(tensor_pb2.DT_STRING, [2]), np.array([b"", b""], object)),
        (proto_of(tensor_pb2.DT_HALF, [3], half_val=[0x3C00]), np.ones(3, np.float16)),
        (
            proto_of(tensor_pb2.DT_COMPLEX64, [2], scomplex_val=[1.0, -1.0]),
            np.array([1 - 1j, 1 - 1j], np.complex64),
        ),
        (proto_of(tensor_pb2.DT_UINT8, [0, 5]), np.zeros((0, 5), np.uint8)),
    ],
    ids=[
        "broadcast",
        "pad-with-last",
        "zeros",
        "string-broadcast",
        "empty-strings",
        "half",
        "complex-broadcast",
        "empty",
    ],
)
def test_fewer_values_fill_the_shape_as_tensorflow_does(
    proto: tensor_pb2.TensorProto, expected: npt.NDArray[Any]
) -> None:
    """One value fills the shape, fewer values are padded with the last, none give zeros."""
    assert_same(to_numpy(proto), expected)


def test_half_val_keeps_the_low_16_bits() -> None:
    """half_val entries are int32s; like TensorFlow's bit_cast, only the low 16 bits count."""
    proto = proto_of(tensor_pb2.DT_HALF, [1], half_val=[0x13C00])

    assert to_numpy(proto).tolist() == [1.0]


# -- malformed protos ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("proto", "message"),
    [
        (proto_of(tensor_pb2.DT_FLOAT, [2], float_val=[1, 2, 3]), "holds 3 values, more than"),
        (proto_of(tensor_pb2.DT_FLOAT, [], float_val=[1, 2]), r"shape \[\] holds 2 values"),
        (proto_of(tensor_pb2.DT_STRING, [0], string_val=[b"x"]), "more than its 0 elements"),
        (proto_of(tensor_pb2.DT_FLOAT, [3], tensor_content=b"\0" * 8), "8 bytes.*expected 12"),
        (proto_of(tensor_pb2.DT_INT64, [0], tensor_content=b"\0"), "1 bytes.*expected 0"),
        (proto_of(tensor_pb2.DT_STRING, [1], tensor_content=b"abc"), "strings go in string_val"),
        (proto_of(99, [1], float_val=[1]), "DataType 99"),
        (proto_of(tensor_pb2.DT_INVALID, [1]), "DT_INVALID"),
        (proto_of(tensor_pb2.DT_RESOURCE, [1]), "DT_RESOURCE"),
        (proto_of(tensor_pb2.DT_QINT8, [1], int_val=[1]), "DT_QINT8"),
        (proto_of(tensor_pb2.DT_FLOAT, [-1, 2], float_val=[1]), "negative dimension in shape"),
        (proto_of(tensor_pb2.DT_COMPLEX64, [1], scomplex_val=[1.0]), "odd number"),
        (proto_of(tensor_pb2.DT_UINT8, [2], int_val=[1, 256]), "int_val 256, outside"),
        (proto_of(tensor_pb2.DT_INT8, [1], int_val=[-129]), r"\[-128, 127\]"),
    ],
    ids=[
        "too-many-values",
        "too-many-for-scalar",
        "values-for-empty",
        "short-content",
        "content-for-empty",
        "string-content",
        "unknown-dtype",
        "invalid-dtype",
        "resource",
        "quantized",
        "negative-dim",
        "odd-complex",
        "uint8-range",
        "int8-range",
    ],
)
def test_malformed_protos_are_invalid_arguments(
    proto: tensor_pb2.TensorProto, message: str
) -> None:
    """A proto whose values, content, dtype or shape do not fit raises, saying what is wrong."""
    with pytest.raises(InvalidArgumentError, match=message):
        to_numpy(reparsed(proto))


def test_unknown_rank_is_rejected() -> None:
    """A tensor value with an unknown rank raises InvalidArgumentError."""
    proto = proto_of(tensor_pb2.DT_FLOAT, [], float_val=[1.0])
    proto.tensor_shape.unknown_rank = True

    with pytest.raises(InvalidArgumentError, match="unknown rank"):
        to_numpy(proto)


@pytest.mark.parametrize("as_content", [False, True])
def test_fill_proto_writes_what_from_numpy_builds(as_content: bool) -> None:
    """fill_proto into an empty TensorProto (e.g. a response's map entry) equals from_numpy."""
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    filled = tensor_pb2.TensorProto()

    fill_proto(filled, array, as_content=as_content)

    assert filled == from_numpy(array, as_content=as_content)
