"""Tests for servinglib.codecs.dtypes: DataType and V2 datatype names ⇄ numpy dtypes."""

from __future__ import annotations

import sys
from typing import Any

import ml_dtypes
import numpy as np
import numpy.typing as npt
import pytest

from servinglib.codecs.dtypes import (
    data_type_name,
    data_type_to_numpy,
    numpy_to_data_type,
    numpy_to_v2_datatype,
    v2_datatype_to_numpy,
)
from servinglib.errors import InvalidArgumentError
from servinglib.protos import tensor_pb2

# Every DataType with a numpy dtype, and that dtype.
NUMPY_BY_DATA_TYPE = {
    tensor_pb2.DT_FLOAT: np.float32,
    tensor_pb2.DT_DOUBLE: np.float64,
    tensor_pb2.DT_HALF: np.float16,
    tensor_pb2.DT_BFLOAT16: ml_dtypes.bfloat16,
    tensor_pb2.DT_INT8: np.int8,
    tensor_pb2.DT_INT16: np.int16,
    tensor_pb2.DT_INT32: np.int32,
    tensor_pb2.DT_INT64: np.int64,
    tensor_pb2.DT_UINT8: np.uint8,
    tensor_pb2.DT_UINT16: np.uint16,
    tensor_pb2.DT_UINT32: np.uint32,
    tensor_pb2.DT_UINT64: np.uint64,
    tensor_pb2.DT_BOOL: np.bool_,
    tensor_pb2.DT_COMPLEX64: np.complex64,
    tensor_pb2.DT_COMPLEX128: np.complex128,
    tensor_pb2.DT_STRING: np.object_,
}
UNSUPPORTED_DATA_TYPES = [
    tensor_pb2.DT_INVALID,
    tensor_pb2.DT_QINT8,
    tensor_pb2.DT_QUINT8,
    tensor_pb2.DT_QINT32,
    tensor_pb2.DT_QINT16,
    tensor_pb2.DT_QUINT16,
    tensor_pb2.DT_RESOURCE,
    tensor_pb2.DT_VARIANT,
]
NUMPY_BY_V2 = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
    "BF16": ml_dtypes.bfloat16,
    "BYTES": np.object_,
}


@pytest.fixture
def without_ml_dtypes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Makes `import ml_dtypes` fail, as in an installation without it."""
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)


def test_every_data_type_is_mapped_or_rejected() -> None:
    """Each of DataType's values 0..23 either has a numpy dtype here or is rejected on purpose."""
    values = {value.number for value in tensor_pb2.DataType.DESCRIPTOR.values}

    assert values == set(NUMPY_BY_DATA_TYPE) | set(UNSUPPORTED_DATA_TYPES) == set(range(24))


@pytest.mark.parametrize("data_type", NUMPY_BY_DATA_TYPE, ids=data_type_name)
def test_data_type_maps_to_numpy_and_back(data_type: int) -> None:
    """A supported DataType gives its numpy dtype, which gives the DataType back."""
    dtype = data_type_to_numpy(data_type)

    assert dtype == np.dtype(NUMPY_BY_DATA_TYPE[data_type])
    assert numpy_to_data_type(dtype) == data_type


@pytest.mark.parametrize("data_type", [*UNSUPPORTED_DATA_TYPES, 24, 101, 999])
def test_unsupported_and_unknown_data_types_are_rejected(data_type: int) -> None:
    """DT_INVALID, quantized, resource, variant and unknown numbers raise, naming the type."""
    with pytest.raises(InvalidArgumentError, match=data_type_name(data_type)):
        data_type_to_numpy(data_type)


def test_data_type_name_names_known_and_unknown_numbers() -> None:
    """Known numbers give their DT_ name, unknown ones say which number they are."""
    assert data_type_name(tensor_pb2.DT_HALF) == "DT_HALF"
    assert data_type_name(42) == "DataType 42"


@pytest.mark.parametrize(
    ("dtype", "data_type"),
    [
        ("<f4", tensor_pb2.DT_FLOAT),
        (">f4", tensor_pb2.DT_FLOAT),
        (">i8", tensor_pb2.DT_INT64),
        (np.longlong, tensor_pb2.DT_INT64),
        (np.intc, tensor_pb2.DT_INT32),
        ("S5", tensor_pb2.DT_STRING),
        ("U3", tensor_pb2.DT_STRING),
        (object, tensor_pb2.DT_STRING),
    ],
)
def test_numpy_to_data_type_ignores_byte_order_and_type_aliases(
    dtype: npt.DTypeLike, data_type: int
) -> None:
    """Byte order, numpy's same-size aliases and fixed-width strings map by kind and size."""
    assert numpy_to_data_type(dtype) == data_type


@pytest.mark.parametrize("dtype", [np.longdouble, "M8[s]", "m8[s]", [("a", "i4")], "V4"])
def test_numpy_dtypes_without_data_type_are_rejected(dtype: npt.DTypeLike) -> None:
    """float128, datetimes, structured and void dtypes raise InvalidArgumentError."""
    with pytest.raises(InvalidArgumentError, match="has no TensorFlow DataType"):
        numpy_to_data_type(dtype)


@pytest.mark.parametrize("datatype", NUMPY_BY_V2)
def test_v2_datatype_maps_to_numpy_and_back(datatype: str) -> None:
    """Each KServe V2 datatype gives its numpy dtype, which gives the name back."""
    dtype = v2_datatype_to_numpy(datatype)

    assert dtype == np.dtype(NUMPY_BY_V2[datatype])
    assert numpy_to_v2_datatype(dtype) == datatype


@pytest.mark.parametrize("datatype", ["fp32", "FLOAT", "STRING", ""])
def test_unknown_v2_datatypes_are_rejected(datatype: str) -> None:
    """Names V2 does not define (case matters) raise, listing the known ones."""
    with pytest.raises(InvalidArgumentError, match="expected one of BOOL, BYTES"):
        v2_datatype_to_numpy(datatype)


@pytest.mark.parametrize("dtype", [np.complex64, np.longdouble, "M8[s]"])
def test_numpy_dtypes_without_v2_datatype_are_rejected(dtype: npt.DTypeLike) -> None:
    """Complex, float128 and datetime dtypes have no V2 name and raise."""
    with pytest.raises(InvalidArgumentError, match="has no V2 datatype"):
        numpy_to_v2_datatype(dtype)


@pytest.mark.parametrize("dtype", ["S4", "U4", object, ">i2"])
def test_numpy_to_v2_datatype_maps_strings_and_ignores_byte_order(
    dtype: npt.DTypeLike,
) -> None:
    """Fixed-width and object strings are BYTES; a big-endian int16 is INT16."""
    assert numpy_to_v2_datatype(dtype) == ("INT16" if dtype == ">i2" else "BYTES")


@pytest.mark.usefixtures("without_ml_dtypes")
def test_bfloat16_without_ml_dtypes_fails_with_an_install_hint() -> None:
    """Without ml_dtypes, DT_BFLOAT16 and BF16 raise InvalidArgumentError saying what to install."""
    with pytest.raises(InvalidArgumentError, match=r"DT_BFLOAT16 need the ml_dtypes.*pip install"):
        data_type_to_numpy(tensor_pb2.DT_BFLOAT16)
    with pytest.raises(InvalidArgumentError, match=r"BF16 need the ml_dtypes.*pip install"):
        v2_datatype_to_numpy("BF16")


@pytest.mark.usefixtures("without_ml_dtypes")
def test_other_types_work_without_ml_dtypes() -> None:
    """Only bfloat16 needs ml_dtypes: the other types map without it."""
    assert data_type_to_numpy(tensor_pb2.DT_HALF) == np.float16
    assert v2_datatype_to_numpy("FP16") == np.float16


@pytest.mark.parametrize(
    ("dtype", "expected"),
    [
        (np.dtype("<f4"), (tensor_pb2.DT_FLOAT, "FP32")),
        (np.dtype(">f4"), (tensor_pb2.DT_FLOAT, "FP32")),
        (np.dtype(ml_dtypes.bfloat16), (tensor_pb2.DT_BFLOAT16, "BF16")),
        (np.dtype("S3"), (tensor_pb2.DT_STRING, "BYTES")),
    ],
)
def test_answers_by_dtype_are_right_when_asked_again(
    dtype: np.dtype[Any], expected: tuple[int, str]
) -> None:
    """The first answer for a dtype object and the second (from the lookup kept) are both right."""
    for _ in range(2):
        assert (numpy_to_data_type(dtype), numpy_to_v2_datatype(dtype)) == expected


def test_a_rejected_dtype_stays_rejected() -> None:
    """A dtype without a type raises every time (failures are not remembered as answers)."""
    for _ in range(2):
        with pytest.raises(InvalidArgumentError):
            numpy_to_data_type(np.dtype(np.longdouble))
        with pytest.raises(InvalidArgumentError):
            numpy_to_v2_datatype(np.dtype(np.complex64))
