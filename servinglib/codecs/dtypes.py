"""Element types: TensorFlow's DataType and KServe V2's datatype names, as numpy dtypes.

Every function raises InvalidArgumentError for a type the other side cannot represent.
"""

from __future__ import annotations

from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from servinglib.errors import InvalidArgumentError
from servinglib.protos import tensor_pb2

T = TypeVar("T")

# Numeric types by numpy (kind, itemsize): by size, not by numpy type object, because numpy has
# several type objects of one size (np.longlong is not np.int64 on Linux).
_DATA_TYPE_BY_KIND_SIZE: dict[tuple[str, int], tensor_pb2.DataType] = {
    ("b", 1): tensor_pb2.DT_BOOL,
    ("i", 1): tensor_pb2.DT_INT8,
    ("i", 2): tensor_pb2.DT_INT16,
    ("i", 4): tensor_pb2.DT_INT32,
    ("i", 8): tensor_pb2.DT_INT64,
    ("u", 1): tensor_pb2.DT_UINT8,
    ("u", 2): tensor_pb2.DT_UINT16,
    ("u", 4): tensor_pb2.DT_UINT32,
    ("u", 8): tensor_pb2.DT_UINT64,
    ("f", 2): tensor_pb2.DT_HALF,
    ("f", 4): tensor_pb2.DT_FLOAT,
    ("f", 8): tensor_pb2.DT_DOUBLE,
    ("c", 8): tensor_pb2.DT_COMPLEX64,
    ("c", 16): tensor_pb2.DT_COMPLEX128,
}
_NUMPY_BY_DATA_TYPE: dict[int, np.dtype[Any]] = {
    data_type: np.dtype(f"{kind}{size}")
    for (kind, size), data_type in _DATA_TYPE_BY_KIND_SIZE.items()
} | {tensor_pb2.DT_STRING: np.dtype(object)}

_V2_BY_KIND_SIZE: dict[tuple[str, int], str] = {
    ("b", 1): "BOOL",
    ("i", 1): "INT8",
    ("i", 2): "INT16",
    ("i", 4): "INT32",
    ("i", 8): "INT64",
    ("u", 1): "UINT8",
    ("u", 2): "UINT16",
    ("u", 4): "UINT32",
    ("u", 8): "UINT64",
    ("f", 2): "FP16",
    ("f", 4): "FP32",
    ("f", 8): "FP64",
}
_NUMPY_BY_V2: dict[str, np.dtype[Any]] = {
    name: np.dtype(f"{kind}{size}") for (kind, size), name in _V2_BY_KIND_SIZE.items()
} | {"BYTES": np.dtype(object)}

_STRING_KINDS = frozenset("OSU")  # object (of bytes or str), fixed-width bytes, fixed-width str
_BFLOAT16 = "bfloat16"  # numpy's name of ml_dtypes.bfloat16

# The answers of numpy_to_data_type and numpy_to_v2_datatype by dtype, filled as dtypes are
# seen: working one out costs ~2 µs (numpy computes ``dtype.name`` in Python), a lookup ~20 ns,
# and encoding every response asks.  Only answers for non-string dtypes are kept (string widths
# are unbounded in number); entries are only ever added, each a GIL-atomic dict store.
_DATA_TYPE_BY_DTYPE: dict[np.dtype[Any], tensor_pb2.DataType] = {}
_V2_BY_DTYPE: dict[np.dtype[Any], str] = {}


def data_type_name(data_type: int) -> str:
    """``data_type``'s name for messages: "DT_FLOAT", or "DataType 42" for an unknown number."""
    try:
        return tensor_pb2.DataType.Name(data_type)
    except ValueError:
        return f"DataType {data_type}"


def data_type_to_numpy(data_type: int) -> np.dtype[Any]:
    """The numpy dtype of a TensorProto's elements of type ``data_type``.

    DT_STRING is ``object`` (elements are ``bytes``); DT_BFLOAT16 is ``ml_dtypes.bfloat16``.
    Raises InvalidArgumentError for DT_INVALID, unknown numbers and the types numpy cannot hold
    (quantized, DT_RESOURCE, DT_VARIANT), and for DT_BFLOAT16 without ml_dtypes.
    """
    dtype = _NUMPY_BY_DATA_TYPE.get(data_type)
    if dtype is not None:
        return dtype
    if data_type == tensor_pb2.DT_BFLOAT16:
        return _bfloat16(data_type_name(data_type))
    raise InvalidArgumentError(f"Tensors of type {data_type_name(data_type)} are not supported")


def numpy_to_data_type(dtype: npt.DTypeLike) -> tensor_pb2.DataType:
    """The DataType of a numpy dtype (byte order ignored); object, S and U are DT_STRING.

    Raises InvalidArgumentError for dtypes TensorFlow has no type for (float128, datetime64,
    structured, ...).
    """
    known = _DATA_TYPE_BY_DTYPE.get(dtype) if isinstance(dtype, np.dtype) else None
    if known is not None:
        return known
    return _learned(
        np.dtype(dtype),
        _DATA_TYPE_BY_DTYPE,
        _DATA_TYPE_BY_KIND_SIZE,
        (tensor_pb2.DT_STRING, tensor_pb2.DT_BFLOAT16, "TensorFlow DataType"),
    )


def v2_datatype_to_numpy(datatype: str) -> np.dtype[Any]:
    """The numpy dtype of KServe V2 ``datatype`` ("FP32", "BYTES", ...; case-sensitive).

    BYTES is ``object`` (elements are ``bytes``); BF16 is ``ml_dtypes.bfloat16``.
    Raises InvalidArgumentError for an unknown name, and for BF16 without ml_dtypes.
    """
    dtype = _NUMPY_BY_V2.get(datatype)
    if dtype is not None:
        return dtype
    if datatype == "BF16":
        return _bfloat16(datatype)
    raise InvalidArgumentError(
        f"Unknown V2 datatype {datatype!r}; expected one of {', '.join(sorted(_NUMPY_BY_V2))}, BF16"
    )


def numpy_to_v2_datatype(dtype: npt.DTypeLike) -> str:
    """The KServe V2 datatype name of a numpy dtype (byte order ignored); object, S, U are BYTES.

    Raises InvalidArgumentError for dtypes V2 has no name for (complex, float128, ...).
    """
    known = _V2_BY_DTYPE.get(dtype) if isinstance(dtype, np.dtype) else None
    if known is not None:
        return known
    return _learned(
        np.dtype(dtype), _V2_BY_DTYPE, _V2_BY_KIND_SIZE, ("BYTES", "BF16", "V2 datatype")
    )


def _learned(
    dtype: np.dtype[Any],
    by_dtype: dict[np.dtype[Any], T],
    by_kind_size: dict[tuple[str, int], T],
    names: tuple[T, T, str],
) -> T:
    """``dtype``'s name on one side (``names``: its string, its bfloat16, the side), kept in
    ``by_dtype`` unless a string."""
    string, bfloat16, side = names
    if dtype.kind in _STRING_KINDS:
        return string
    found = bfloat16 if dtype.name == _BFLOAT16 else by_kind_size.get((dtype.kind, dtype.itemsize))
    if found is None:
        raise InvalidArgumentError(f"numpy dtype {dtype} has no {side}")
    by_dtype[dtype] = found
    return found


def _bfloat16(type_name: str) -> np.dtype[Any]:
    try:
        import ml_dtypes
    except ImportError as error:
        raise InvalidArgumentError(
            f"Tensors of type {type_name} need the ml_dtypes package, which is not installed"
            " (pip install ml_dtypes; TensorFlow depends on it)"
        ) from error
    bfloat16: np.dtype[Any] = np.dtype(ml_dtypes.bfloat16)
    return bfloat16
