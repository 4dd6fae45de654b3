"""Tests for servinglib.errors: status codes, their HTTP mapping and the exception tree."""

from __future__ import annotations

import pytest

from servinglib import errors
from servinglib.errors import (
    MAX_MESSAGE_BYTES,
    ServingError,
    StatusCode,
    UnknownError,
    bounded_message,
    shortened,
)

GRPC_NUMBERS = {
    "OK": 0,
    "CANCELLED": 1,
    "UNKNOWN": 2,
    "INVALID_ARGUMENT": 3,
    "DEADLINE_EXCEEDED": 4,
    "NOT_FOUND": 5,
    "ALREADY_EXISTS": 6,
    "PERMISSION_DENIED": 7,
    "RESOURCE_EXHAUSTED": 8,
    "FAILED_PRECONDITION": 9,
    "ABORTED": 10,
    "OUT_OF_RANGE": 11,
    "UNIMPLEMENTED": 12,
    "INTERNAL": 13,
    "UNAVAILABLE": 14,
    "DATA_LOSS": 15,
    "UNAUTHENTICATED": 16,
}

# TF Serving's ToHTTPStatusCode (model_servers/http_server.cc).
HTTP_STATUSES = {
    "OK": 200,
    "CANCELLED": 499,
    "UNKNOWN": 500,
    "INVALID_ARGUMENT": 400,
    "DEADLINE_EXCEEDED": 504,
    "NOT_FOUND": 404,
    "ALREADY_EXISTS": 409,
    "PERMISSION_DENIED": 403,
    "RESOURCE_EXHAUSTED": 429,
    "FAILED_PRECONDITION": 400,
    "ABORTED": 409,
    "OUT_OF_RANGE": 400,
    "UNIMPLEMENTED": 501,
    "INTERNAL": 500,
    "UNAVAILABLE": 503,
    "DATA_LOSS": 500,
    "UNAUTHENTICATED": 401,
}

ERROR_CODES = [code for code in StatusCode if code is not StatusCode.OK]


def test_status_codes_are_exactly_grpcs() -> None:
    """StatusCode has gRPC's 17 canonical codes, each with gRPC's name and number."""
    assert {code.name: code.value for code in StatusCode} == GRPC_NUMBERS


@pytest.mark.parametrize("code", list(StatusCode), ids=lambda code: code.name)
def test_http_status_follows_tf_serving(code: StatusCode) -> None:
    """Each code maps to the HTTP status TF Serving's REST server answers with."""
    assert code.http_status == HTTP_STATUSES[code.name]


@pytest.mark.parametrize("code", ERROR_CODES, ids=lambda code: code.name)
def test_from_code_builds_the_subclass_of_that_code(code: StatusCode) -> None:
    """from_code returns an instance of a ServingError subclass carrying exactly that code."""
    error = ServingError.from_code(code, "what went wrong")

    assert isinstance(error, ServingError)
    assert type(error) is not ServingError
    assert error.code is code
    assert type(error).code is code
    assert error.message == "what went wrong"
    assert str(error) == "what went wrong"


def test_each_error_code_has_its_own_class() -> None:
    """The 16 non-OK codes map to 16 distinct classes, all exported by servinglib.errors."""
    classes = {type(ServingError.from_code(code, "m")) for code in ERROR_CODES}

    assert len(classes) == len(ERROR_CODES)
    assert all(getattr(errors, cls.__name__) is cls for cls in classes)


def test_from_code_rejects_ok() -> None:
    """OK is not an error, so from_code refuses to build one for it."""
    with pytest.raises(ValueError, match="OK"):
        ServingError.from_code(StatusCode.OK, "fine")


def test_repr_names_class_code_and_message() -> None:
    """repr shows the class, the code's name and the message; str is the message alone."""
    error = errors.NotFoundError("no such model")

    assert repr(error) == "NotFoundError(NOT_FOUND: 'no such model')"
    assert str(error) == "no such model"


def test_errors_compare_by_code_and_message() -> None:
    """Two errors are equal (and hash alike) iff code and message are equal."""
    first = errors.UnavailableError("busy")
    same = errors.UnavailableError("busy")

    assert first == same
    assert hash(first) == hash(same)
    assert first != errors.UnavailableError("other")
    assert first != errors.InternalError("busy")
    assert first != "busy"


def test_wrap_keeps_a_serving_error_as_is() -> None:
    """wrap returns a ServingError itself, ignoring the context."""
    error = errors.DataLossError("corrupt checkpoint")

    assert ServingError.wrap(error, "Loading servable failed") is error


def test_wrap_turns_a_foreign_exception_into_unknown_with_cause() -> None:
    """A foreign exception becomes UNKNOWN naming its type, prefixed by the context, chained."""
    cause = RuntimeError("out of file handles")

    wrapped = ServingError.wrap(cause, "Loading servable {name: m version: 1} failed")

    assert isinstance(wrapped, UnknownError)
    assert wrapped.code is StatusCode.UNKNOWN
    assert wrapped.message == (
        "Loading servable {name: m version: 1} failed: RuntimeError: out of file handles"
    )
    assert wrapped.__cause__ is cause


def test_wrap_without_context_is_type_and_message() -> None:
    """Without a context the wrapped message is just the foreign type and message."""
    wrapped = ServingError.wrap(KeyError("signature"))

    assert wrapped.message == "KeyError: 'signature'"
    assert isinstance(wrapped.__cause__, KeyError)


def test_shortened_keeps_short_text_and_cuts_long_text_saying_how_much() -> None:
    """Text up to 200 characters is kept; longer keeps 200 and counts the rest."""
    assert shortened("m" * 200) == "m" * 200
    assert shortened("m" * 1_000_000) == "m" * 200 + "… (999800 more characters)"


def test_bounded_message_fits_its_bytes_whatever_the_characters() -> None:
    """A message past the bound is cut on a character boundary to fit, saying so."""
    assert bounded_message("short") == "short"
    for character in ("n", "é", "😀"):
        message = bounded_message(f"Model {character * 1_000_000} not found")
        assert len(message.encode()) <= MAX_MESSAGE_BYTES
        assert message.endswith("more characters)")
