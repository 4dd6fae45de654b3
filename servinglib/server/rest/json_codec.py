"""JSON in and out: orjson on the fast path, the standard library for NaN and Infinity."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import orjson

from servinglib.errors import InvalidArgumentError

_NON_FINITE_TOKENS = (b"NaN", b"Infinity")


def loads(body: bytes) -> Any:  # noqa: ANN401 - any JSON value
    """The JSON value of ``body``.

    Raises InvalidArgumentError naming the problem (not UTF-8, truncated,
    too deeply nested, a syntax error and where).
    """
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as error:
        if any(token in body for token in _NON_FINITE_TOKENS):
            return _loads_with_non_finite(body, error)
        raise InvalidArgumentError(f"Malformed JSON in the request body: {error}") from None


def _loads_with_non_finite(body: bytes, orjson_error: Exception) -> Any:  # noqa: ANN401
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidArgumentError(f"Malformed JSON in the request body: {orjson_error}") from None
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as error:
        detail = "nested too deeply" if isinstance(error, RecursionError) else str(error)
        raise InvalidArgumentError(f"Malformed JSON in the request body: {detail}") from None


def dumps(value: Any) -> bytes:  # noqa: ANN401 - any JSON-able value
    """``value`` as JSON bytes; NaN and ±Infinity as TF Serving's bare tokens.

    Numpy arrays of numbers and bools are written directly by orjson.
    """
    body = orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY)
    if b"null" not in body:
        return body
    # The standard library writes NaN and ±Infinity as bare tokens (it needs plain lists).
    return json.dumps(_plain(value), separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _plain(value: Any) -> Any:  # noqa: ANN401 - any JSON-able value
    """``value`` with numpy arrays and scalars as Python lists and numbers (for the json module)."""
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, np.ndarray | np.generic):
        return value.tolist()
    return value
