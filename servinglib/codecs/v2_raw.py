"""KServe V2 raw tensor bytes ⇄ numpy: Triton's binary data extension and gRPC raw contents."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import numpy.typing as npt

from servinglib.codecs.dtypes import numpy_to_v2_datatype, v2_datatype_to_numpy
from servinglib.codecs.limits import DEFAULT_LIMITS, DecodeLimits, element_count
from servinglib.errors import InvalidArgumentError

_LENGTH = struct.Struct("<I")
# The little-endian dtype of each fixed-size datatype decoded so far (filled on first use, as
# BF16 needs ml_dtypes; each entry a GIL-atomic dict store): building one per request costs
# more than the rest of decoding a small tensor.
_LITTLE_ENDIAN: dict[str, np.dtype[Any]] = {}


def decode_raw(
    datatype: str,
    shape: tuple[int, ...],
    data: bytes | bytearray | memoryview,
    *,
    name: str = "",
    limits: DecodeLimits = DEFAULT_LIMITS,
) -> npt.NDArray[Any]:
    """The tensor ``name`` of V2 ``datatype`` and ``shape`` held in ``data``.

    Nothing is allocated before the shape is checked against ``limits`` and
    the bytes against the shape (BYTES: at least 4 length bytes per element).
    Raises InvalidArgumentError naming the tensor when the byte count does
    not match datatype x shape, for negative dimensions, a shape over the
    limits, and an unknown datatype.
    """
    count = element_count(shape, lambda: _what(name), limits)
    if datatype == "BYTES":
        return _decode_bytes(data, count, _what(name)).reshape(shape)
    dtype = _LITTLE_ENDIAN.get(datatype)
    if dtype is None:
        dtype = v2_datatype_to_numpy(datatype).newbyteorder("<")
        _LITTLE_ENDIAN[datatype] = dtype
    expected = count * dtype.itemsize
    if len(data) != expected:
        raise InvalidArgumentError(
            f"{_what(name)} has {len(data)} bytes of raw data, but {datatype} {list(shape)} "
            f"needs {expected}"
        )
    return np.frombuffer(data, dtype=dtype).reshape(shape)


def _what(name: str) -> str:
    return f"Input tensor '{name}'" if name else "Input tensor"


def encode_raw(array: npt.NDArray[Any]) -> tuple[str, bytes]:
    """The V2 datatype of ``array`` and its raw bytes.

    Raises InvalidArgumentError for dtypes V2 cannot carry (e.g. complex).
    """
    datatype = numpy_to_v2_datatype(array.dtype)
    if datatype == "BYTES":
        return datatype, _encode_bytes(array)
    if array.dtype.byteorder == ">":
        array = array.astype(array.dtype.newbyteorder("<"))
    return datatype, array.tobytes()  # row-major bytes, whatever the array's layout


def _decode_bytes(data: bytes | bytearray | memoryview, count: int, what: str) -> npt.NDArray[Any]:
    view = memoryview(data).cast("B")
    size = len(view)
    if size < count * _LENGTH.size:  # checked before the array of count elements is made
        raise InvalidArgumentError(
            f"{what}: {size} bytes of BYTES data cannot hold {count} elements"
            f" (each needs {_LENGTH.size} length bytes)"
        )
    items = np.empty(count, dtype=object)
    offset = 0
    for index in range(count):
        if offset + 4 > size:
            raise InvalidArgumentError(f"{what}: BYTES data ends after {index} of {count} elements")
        (length,) = _LENGTH.unpack_from(view, offset)
        offset += 4
        if offset + length > size:
            raise InvalidArgumentError(
                f"{what}: BYTES element {index} claims {length} bytes, but only "
                f"{size - offset} remain"
            )
        items[index] = bytes(view[offset : offset + length])
        offset += length
    if offset != size:
        raise InvalidArgumentError(
            f"{what}: {size - offset} bytes left over after {count} BYTES elements"
        )
    return items


def _encode_bytes(array: npt.NDArray[Any]) -> bytes:
    parts: list[bytes] = []
    for item in array.reshape(-1):
        value = item.encode() if isinstance(item, str) else bytes(item)
        parts.append(_LENGTH.pack(len(value)))
        parts.append(value)
    return b"".join(parts)
