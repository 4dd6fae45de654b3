"""V2 raw tensor bytes: every datatype round-trips; sizes that do not match are clear errors."""

from __future__ import annotations

import struct

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from servinglib.codecs.v2_raw import decode_raw, encode_raw
from servinglib.errors import InvalidArgumentError

NUMERIC = [
    ("BOOL", np.bool_),
    ("UINT8", np.uint8),
    ("UINT16", np.uint16),
    ("UINT32", np.uint32),
    ("UINT64", np.uint64),
    ("INT8", np.int8),
    ("INT16", np.int16),
    ("INT32", np.int32),
    ("INT64", np.int64),
    ("FP16", np.float16),
    ("FP32", np.float32),
    ("FP64", np.float64),
    ("BF16", ml_dtypes.bfloat16),
]


@pytest.mark.parametrize(("datatype", "dtype"), NUMERIC)
def test_numeric_round_trip(datatype: str, dtype: type) -> None:
    """Each fixed-size datatype encodes little-endian and decodes to the same values."""
    array = np.arange(6).reshape(2, 3).astype(dtype)
    name, raw = encode_raw(array)
    assert name == datatype
    assert len(raw) == array.size * np.dtype(dtype).itemsize
    decoded = decode_raw(datatype, (2, 3), raw)
    assert decoded.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(decoded.astype(np.float64), array.astype(np.float64))


def test_fixed_size_decoding_views_the_buffer() -> None:
    """Numeric tensors decode without a copy (the array views the request's bytes)."""
    raw = np.arange(4, dtype="<f4").tobytes()
    decoded = decode_raw("FP32", (4,), raw)
    assert np.shares_memory(decoded, np.frombuffer(raw, np.uint8))


def test_big_endian_input_is_written_little_endian() -> None:
    """Arrays in big-endian byte order are converted, so the wire is always little-endian."""
    _, raw = encode_raw(np.array([1, 2], dtype=">i4"))
    assert raw == struct.pack("<2i", 1, 2)


@given(st.lists(st.binary(max_size=20), max_size=12))
def test_bytes_round_trip(items: list[bytes]) -> None:
    """BYTES elements are length-prefixed and come back exactly, empty ones included."""
    array = np.array([*items, b""], dtype=object)
    name, raw = encode_raw(array)
    assert name == "BYTES"
    assert list(decode_raw("BYTES", (len(array),), raw)) == list(array)


def test_bytes_layout_is_tritons() -> None:
    """Each element is a 4-byte little-endian length and its bytes; str items encode as UTF-8."""
    _, raw = encode_raw(np.array(["é", b"ab"], dtype=object))
    assert raw == b"\x02\x00\x00\x00\xc3\xa9\x02\x00\x00\x00ab"


@pytest.mark.parametrize(
    ("datatype", "shape", "raw", "message"),
    [
        ("FP32", (3,), b"\x00" * 8, "8 bytes of raw data, but FP32 \\[3\\] needs 12"),
        ("FP32", (-1,), b"", "negative dimension"),
        ("BYTES", (2,), b"\x01\x00\x00\x00abcd", "ends after 1 of 2"),
        ("BYTES", (2,), b"\x01\x00\x00\x00a", "5 bytes of BYTES data cannot hold 2 elements"),
        ("BYTES", (1,), b"\x05\x00\x00\x00ab", "claims 5 bytes"),
        ("BYTES", (1,), b"\x01\x00\x00\x00ab", "1 bytes left over"),
        ("FP8", (1,), b"\x00", "Unknown V2 datatype"),
    ],
)
def test_malformed_raw_data_is_invalid_argument(
    datatype: str, shape: tuple[int, ...], raw: bytes, message: str
) -> None:
    """Sizes that do not fit, truncated BYTES and unknown datatypes: errors saying what is wrong."""
    with pytest.raises(InvalidArgumentError, match=message):
        decode_raw(datatype, shape, raw, name="x")
