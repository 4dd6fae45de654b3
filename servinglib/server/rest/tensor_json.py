"""JSON values ⇄ numpy arrays, shared by the TF Serving and KServe V2 codecs."""

from __future__ import annotations

import base64
import binascii
import importlib
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from servinglib.errors import InvalidArgumentError

_MAX_RANK = 32  # deeper nesting is refused before numpy (whose limit is 64) or recursion sees it


_MAX_ECHO = 200  # characters of numpy's message quoted in an error (it may quote the value)
_OBJECT = np.dtype(object)
# JSON kinds numpy infers (b: true/false, i/u: integers, f: numbers with a fraction or exponent)
# that each target kind accepts.
_ACCEPTED_KINDS = {"b": "b", "i": "iu", "u": "iu", "f": "iuf"}


def is_b64(value: object) -> bool:
    """True for TF Serving's binary string object ``{"b64": "<base64>"}``."""
    return isinstance(value, dict) and len(value) == 1 and "b64" in value


def to_array(value: Any, dtype: np.dtype[Any], what: str) -> npt.NDArray[Any]:  # noqa: ANN401
    """``value`` (a JSON scalar or nested lists) as an array of ``dtype``.

    ``what`` names the tensor in errors.  Raises InvalidArgumentError for
    ragged lists, nesting deeper than 32, and values of the wrong kind
    (strings for numbers, fractions for integers, out-of-range integers).
    """
    if dtype == _OBJECT:
        return _strings(value, what)
    short = _short_float_list(value, dtype)
    if short is not None:
        return short
    try:
        # numpy would make a string array for one string among numbers, each element as wide
        # as the longest string: a 200 KB body of one 10,000-character string and 50,000
        # numbers is a 2 GB array.  Its dtype is found first, without allocating.
        found, _shape = _discover_dtype_and_shape(value)
        if found is not None and found.kind in "SU":  # None: no elements at all
            raise InvalidArgumentError(f"{what}: strings where {_kind_name(dtype)} expected")
        array = np.asarray(value)
    except (ValueError, TypeError, OverflowError) as error:
        raise InvalidArgumentError(
            f"{what}: not a rectangular array of numbers ({str(error)[:_MAX_ECHO]})"
        ) from None
    if array.ndim > _MAX_RANK:
        raise InvalidArgumentError(f"{what}: nested {array.ndim} levels deep, at most {_MAX_RANK}")
    kind = dtype.kind
    if kind == "f" and array.dtype.kind in "iuf":  # numbers for a float tensor: the common case
        return array if array.dtype == dtype else _cast(array, dtype, what)
    if kind == "u" and dtype.itemsize == 8 and array.dtype.kind in "fO":
        return _large_uint64(value, array, what)  # integers past int64 made numpy guess float
    accepted = _ACCEPTED_KINDS.get(kind, "iuf")  # bfloat16 (kind 'V') takes what floats take
    if array.size and array.dtype.kind not in accepted:
        raise InvalidArgumentError(f"{what}: {_describe(array)} where {_kind_name(dtype)} expected")
    if kind in "iu" and array.size and array.dtype != dtype:
        low, high = _integer_bounds(dtype)
        if array.size <= _FEW:  # numpy's reductions cost microseconds, whatever the size
            values = array.ravel().tolist()
            smallest, largest = min(values), max(values)
        else:
            smallest, largest = array.min(), array.max()
        if smallest < low or largest > high:
            raise InvalidArgumentError(f"{what}: a value is out of the range of {dtype.name}")
    return array if array.dtype == dtype else _cast(array, dtype, what)


_FEW = 16
_BOUNDS: dict[np.dtype[Any], tuple[int, int]] = {}
# the largest finite value of each float dtype (bfloat16, kind 'V', takes the general path)
_FLOAT_LIMITS = {np.dtype(t): float(np.finfo(t).max) for t in (np.float16, np.float32, np.float64)}
_INT64_LIMIT = 2**63


def _short_float_list(value: Any, dtype: np.dtype[Any]) -> npt.NDArray[Any] | None:  # noqa: ANN401
    """A flat list of at most 16 numbers (what tritonclient sends for a small tensor) as a
    ``dtype`` array, with no look at its shape or kinds first: floats within the dtype's finite
    range and integers within int64's, as the general path reads them; None for anything else
    (the general path then reads it, or says what is wrong)."""
    if type(value) is not list or len(value) > _FEW:
        return None
    limit = _FLOAT_LIMITS.get(dtype)
    if limit is None:
        return None
    for item in value:
        kind = type(item)
        if kind is float:
            if not -limit <= item <= limit:  # out of range, inf or nan
                return None
        elif (
            kind is not int
            or not -_INT64_LIMIT <= item < _INT64_LIMIT
            or not -limit <= item <= limit
        ):
            return None  # (bool is not int here: booleans take the general path)
    return np.array(value, dtype)


def _integer_bounds(dtype: np.dtype[Any]) -> tuple[int, int]:
    bounds = _BOUNDS.get(dtype)
    if bounds is None:  # a few integer dtypes: a race makes the same entry twice
        info = np.iinfo(dtype)
        bounds = _BOUNDS[dtype] = (int(info.min), int(info.max))
    return bounds


def _cast(array: npt.NDArray[Any], dtype: np.dtype[Any], what: str) -> npt.NDArray[Any]:
    try:
        with np.errstate(over="raise"):  # 1e300 as float32 is an error, not a silent inf
            return array.astype(dtype)
    except FloatingPointError:
        raise InvalidArgumentError(f"{what}: a value is out of the range of {dtype.name}") from None
    except (ValueError, TypeError, OverflowError) as error:
        raise InvalidArgumentError(f"{what}: cannot be read as {dtype.name} ({error})") from None


def _large_uint64(value: Any, guessed: npt.NDArray[Any], what: str) -> npt.NDArray[Any]:  # noqa: ANN401
    try:
        items = np.array(value, dtype=object)
    except ValueError as error:
        raise InvalidArgumentError(
            f"{what}: not a rectangular array of numbers ({error})"
        ) from None
    for item in items.reshape(-1):
        if isinstance(item, bool) or not isinstance(item, int) or not 0 <= item < 2**64:
            raise InvalidArgumentError(
                f"{what}: {_describe(guessed)} where integers (uint64) expected"
            )
    return items.astype(np.uint64)


def _describe(array: npt.NDArray[Any]) -> str:
    return {
        "b": "booleans",
        "i": "integers",
        "u": "integers",
        "f": "fractional numbers",
        "U": "strings",
    }.get(array.dtype.kind, "non-numeric or ragged values")


def _kind_name(dtype: np.dtype[Any]) -> str:
    if dtype.kind == "b":
        return "booleans"
    if dtype.kind in "iu":
        return f"integers ({dtype.name})"
    return f"numbers ({dtype.name})"


def _strings(value: Any, what: str) -> npt.NDArray[Any]:  # noqa: ANN401
    nested = _bytes_of(value, what, 0)
    if not isinstance(nested, list):
        array = np.empty((), dtype=object)
        array[()] = nested
        return array
    try:
        array = np.array(nested, dtype=object)
    except ValueError as error:
        raise InvalidArgumentError(
            f"{what}: not a rectangular array of strings ({error})"
        ) from None
    if any(isinstance(item, list) for item in array.reshape(-1)[:1]):
        raise InvalidArgumentError(f"{what}: not a rectangular array of strings")
    return array


def _bytes_of(value: Any, what: str, depth: int) -> Any:  # noqa: ANN401
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, list):
        if depth >= _MAX_RANK:
            raise InvalidArgumentError(f"{what}: nested more than {_MAX_RANK} levels deep")
        return [_bytes_of(item, what, depth + 1) for item in value]
    if is_b64(value):
        return decode_b64(value["b64"], what)
    raise InvalidArgumentError(
        f'{what}: expected strings or {{"b64": ...}} objects, got {_json_type(value)}'
    )


def decode_b64(text: object, what: str) -> bytes:
    """The bytes of a ``{"b64": text}`` object; InvalidArgumentError if ``text`` is not base64."""
    if not isinstance(text, str):
        raise InvalidArgumentError(f'{what}: the value of "b64" must be a string')
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as error:
        raise InvalidArgumentError(f"{what}: invalid base64 ({error})") from None


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def json_type(value: object) -> str:
    """The JSON type of ``value`` for error messages ("null", "a number", "an object", ...)."""
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return _json_type(value)


def strings_to_json(array: npt.NDArray[Any], *, as_b64: bool) -> Any:  # noqa: ANN401
    """A string tensor as nested lists: UTF-8 text, or ``{"b64": ...}`` objects if ``as_b64``.

    Elements that are not valid UTF-8 are written as ``{"b64": ...}`` even
    when ``as_b64`` is false, so the response stays valid JSON.
    """
    converted = np.empty(array.shape, dtype=object)
    flat = converted.reshape(-1)
    for index, item in enumerate(array.reshape(-1)):
        flat[index] = _string_to_json(item, as_b64)
    return converted.tolist()


def _string_to_json(item: object, as_b64: bool) -> object:
    data = item.encode("utf-8") if isinstance(item, str) else bytes(item)  # type: ignore[call-overload]
    if not as_b64:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            pass
    return {"b64": base64.b64encode(data).decode("ascii")}


def numbers_to_json(array: npt.NDArray[Any]) -> Any:  # noqa: ANN401 - an array or a JSON value
    """A numeric tensor in a form :func:`json_codec.dumps` writes (NaN and ±Inf included).

    C-contiguous arrays of types orjson writes natively are returned as they
    are (orjson serializes them without a Python loop); others as lists.
    """
    kind = array.dtype.kind
    if kind == "V":  # bfloat16 (ml_dtypes): orjson does not know it
        array = array.astype(np.float32)
        kind = "f"
    if array.ndim == 0 or kind not in "biuf":
        return array.tolist()
    if not array.flags.c_contiguous or array.dtype.byteorder == ">":
        array = np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("="))
    return array


def _holds_string(value: Any, depth: int = 0) -> bool:  # noqa: ANN401 - a JSON value
    """Whether nested lists hold a string anywhere (the slow way, element by element)."""
    if isinstance(value, str):
        return True
    if not isinstance(value, list) or depth > _MAX_RANK:
        return False
    return any(_holds_string(item, depth + 1) for item in value)


def _string_dtype_by_walking(value: Any) -> tuple[np.dtype[Any] | None, tuple[int, ...]]:  # noqa: ANN401
    """The fallback of :data:`_discover_dtype_and_shape`: answers only whether it is strings."""
    return (np.dtype("U1") if _holds_string(value) else None), ()


def _dtype_discovery() -> Callable[[Any], tuple[np.dtype[Any] | None, tuple[int, ...]]]:
    """numpy's own first step of np.asarray, or a walk of the lists where numpy lacks it.

    ``_discover_array_parameters`` is public in behaviour (numpy's tests use
    it) though not in name: the dtype (None for no elements) and shape a
    value would make, found without allocating.  A numpy that renames it
    costs speed on string checks, never the import.
    """
    try:
        module = importlib.import_module("numpy._core._multiarray_umath")
        return module._discover_array_parameters  # type: ignore[no-any-return]  # noqa: SLF001 - see above
    except (ImportError, AttributeError):
        return _string_dtype_by_walking


_discover_dtype_and_shape = _dtype_discovery()
