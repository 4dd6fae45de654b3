"""tensor_json: JSON numbers to arrays and back, on the fast paths and off them."""

from __future__ import annotations

import re

import numpy as np
import pytest

from servinglib.errors import InvalidArgumentError
from servinglib.server.rest import json_codec
from servinglib.server.rest.tensor_json import numbers_to_json, to_array

F32 = np.dtype(np.float32)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ([[0.5, 1.5]], np.array([[0.5, 1.5]], np.float32)),
        ([[1, 2]], np.array([[1, 2]], np.float32)),
        ([], np.array([], np.float32)),
        (2.5, np.array(2.5, np.float32)),
    ],
)
def test_numbers_for_a_float_tensor(value: object, expected: np.ndarray) -> None:
    """Fractions, integers, empty lists and scalars all become float32 arrays of that shape."""
    array = to_array(value, F32, "x")
    assert array.dtype == F32
    np.testing.assert_array_equal(array, expected)


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ([1e300], "out of the range of float32"),
        ([True, False], "booleans where numbers (float32) expected"),
        (["1.5"], "strings where numbers (float32) expected"),
        ([[1.0], [1.0, 2.0]], "not a rectangular array"),
    ],
)
def test_what_a_float_tensor_refuses(value: object, fragment: str) -> None:
    """Overflow, booleans, strings and ragged lists are InvalidArgumentErrors naming the problem."""
    with pytest.raises(InvalidArgumentError, match=re.escape(fragment)):
        to_array(value, F32, "x")


def test_float64_values_stay_as_they_are() -> None:
    """A float64 tensor takes numpy's own array without a copy."""
    given = np.array([1.0, 2.0])
    assert to_array(given, np.dtype(np.float64), "x") is given
    assert to_array([1.0, 2.0], np.dtype(np.float64), "x").dtype == np.float64


@pytest.mark.parametrize(
    ("array", "expected"),
    [
        (np.array([1.0, 2.0], np.float32), b"[1.0,2.0]"),
        (np.array([3e38, 3e38], np.float32), b"[3e+38,3e+38]"),  # their sum would overflow
        (np.array([1.0, np.nan], np.float32), b"[1.0,NaN]"),
        (np.array([[-np.inf], [np.inf]], np.float64), b"[[-Infinity],[Infinity]]"),
        (np.array([], np.float32), b"[]"),
        (np.array([1, 2], np.int32), b"[1,2]"),
        (np.array(np.nan, np.float32), b"NaN"),
    ],
)
def test_numbers_are_written_with_non_finite_tokens(array: np.ndarray, expected: bytes) -> None:
    """What numbers_to_json returns json_codec writes exactly, NaN and ±Infinity as bare tokens."""
    assert json_codec.dumps(numbers_to_json(array)) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"a": None, "b": np.array([1.5], np.float32)}, b'{"a":null,"b":[1.5]}'),
        ({"text": "null", "y": [float("inf")]}, b'{"text":"null","y":[Infinity]}'),
        ([np.float32(np.nan), np.int64(3), (1, 2)], b"[NaN,3,[1,2]]"),
    ],
)
def test_nulls_and_the_text_null_survive_the_rewrite(value: object, expected: bytes) -> None:
    """A body with a true null or the text "null" is rewritten by the standard library, intact."""
    assert json_codec.dumps(value) == expected
