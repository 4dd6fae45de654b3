"""tensor_json: JSON numbers to arrays and back, on the fast paths and off them."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servinglib.errors import InvalidArgumentError
from servinglib.server.rest import json_codec, tensor_json
from servinglib.server.rest.tensor_json import numbers_to_json, to_array
from tests.codecs.test_limits import (
    BODY_MULTIPLE,
    OVERHEAD_BYTES,
    decode_bounded,
    peak_allocated,
)

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


@pytest.mark.parametrize("size", [1, 16, 17, 1000], ids=lambda n: f"{n}-values")
@pytest.mark.parametrize(
    ("dtype", "low", "high"),
    [(np.int32, -(2**31), 2**31 - 1), (np.uint8, 0, 255), (np.int8, -128, 127)],
)
def test_integers_are_checked_against_the_tensor_s_range(
    size: int, dtype: type, low: int, high: int
) -> None:
    """The extremes of the range pass; one past either end, anywhere in a small tensor
    (checked value by value) or a large one (by numpy), is refused naming the dtype."""
    fits = [low, high] + [0] * (size - 2) if size > 1 else [high]
    assert to_array(fits, np.dtype(dtype), "x").tolist() == fits
    for outside in (low - 1, high + 1):
        value = [0] * (size - 1) + [outside]
        with pytest.raises(InvalidArgumentError, match=f"out of the range of {np.dtype(dtype)}"):
            to_array(value, np.dtype(dtype), "x")


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


def test_one_long_string_among_numbers_is_refused_before_a_string_array_is_made() -> None:
    """A 1,000-character string among 10,000 numbers is a 400, not a 40 MB array of strings."""
    value = ["a" * 1000] + [1] * 10_000
    body_bytes = len(json.dumps(value))
    with peak_allocated() as peak, pytest.raises(InvalidArgumentError, match="strings where"):
        to_array(value, np.dtype(np.float32), "Input 'x'")
    assert peak[0] < OVERHEAD_BYTES + BODY_MULTIPLE * body_bytes


JSON_SCALARS = st.one_of(
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.booleans(),
    st.none(),
    st.text(max_size=300),
    st.builds(lambda text: {"b64": text}, st.text(max_size=40)),
)
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.lists(inner, max_size=30), max_leaves=200)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    value=JSON_VALUES,
    dtype=st.sampled_from([np.float32, np.int32, np.uint64, np.bool_, object]),
)
def test_json_tensors_decode_or_are_refused_cheaply(value: object, dtype: type) -> None:
    """Random JSON values (row or columnar, b64 included) decode, or are refused cheaply."""
    decode_bounded(lambda: to_array(value, np.dtype(dtype), "Input 'x'"), len(json.dumps(value)))


@pytest.mark.parametrize(
    "value",
    [[1, 2, "x"], [[1.5], ["a"]], "s", [[[["deep"]]]]],
)
def test_the_fallback_finds_strings_as_numpy_does(value: object) -> None:
    """Without numpy's private dtype discovery, strings among numbers are still found first."""
    assert tensor_json._discover_dtype_and_shape(value)[0].kind in "SU"  # type: ignore[union-attr]
    assert tensor_json._string_dtype_by_walking(value)[0] == np.dtype("U1")


@pytest.mark.parametrize("value", [[1, 2.5], [[True], [False]], [], 3, [[1], [2, 3]]])
def test_the_fallback_passes_numbers_on(value: object) -> None:
    """Numbers, empties and ragged numbers are left to np.asarray, as with numpy's discovery."""
    assert tensor_json._string_dtype_by_walking(value)[0] is None


def test_to_array_refuses_strings_through_the_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the fallback in place, a string among numbers is refused before numpy widens it."""
    monkeypatch.setattr(
        tensor_json, "_discover_dtype_and_shape", tensor_json._string_dtype_by_walking
    )
    with pytest.raises(InvalidArgumentError, match="strings where numbers"):
        to_array([1.0, "x" * 10_000], np.dtype(np.float32), "x")
    assert to_array([[1, 2]], np.dtype(np.float32), "x").tolist() == [[1.0, 2.0]]


_SHORT_LIST_ITEMS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([2**63 - 1, -(2**63), 2**63, 65504, 65520, 3.4028235e38, True, None, "1"]),
)


@settings(max_examples=400, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    value=st.lists(_SHORT_LIST_ITEMS, max_size=20),
    dtype=st.sampled_from([np.float16, np.float32, np.float64]),
)
def test_a_short_flat_list_reads_as_the_general_path_reads_it(
    value: list[object], dtype: type, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The short-list path (flat lists of at most 16 numbers, as tritonclient sends them) gives
    the general path's array, or leaves the list to it: same dtype, shape and values, or the
    same error."""

    def read(value: list[object]) -> np.ndarray | str:
        try:
            return to_array(value, np.dtype(dtype), "x")
        except InvalidArgumentError as error:
            return error.message

    short = read(value)
    with monkeypatch.context() as patched:
        patched.setattr(tensor_json, "_short_float_list", lambda value, dtype: None)
        general = read(value)
    if isinstance(general, str):
        assert short == general
    else:
        assert isinstance(short, np.ndarray)
        assert (short.dtype, short.shape) == (general.dtype, general.shape)
        np.testing.assert_array_equal(short, general)
