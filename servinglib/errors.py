"""Canonical status codes and the exception tree raised at servinglib's edges."""

from __future__ import annotations

import enum
from typing import ClassVar, Final, final


@final
class StatusCode(enum.IntEnum):
    """gRPC's canonical status codes, with gRPC's names and numbers."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16

    @property
    def http_status(self) -> int:
        """The HTTP status TF Serving's REST server answers with for this code."""
        return _HTTP_STATUS[self]


# TF Serving's ToHTTPStatusCode (model_servers/http_server.cc).
_HTTP_STATUS: dict[StatusCode, int] = {
    StatusCode.OK: 200,
    StatusCode.CANCELLED: 499,
    StatusCode.UNKNOWN: 500,
    StatusCode.INVALID_ARGUMENT: 400,
    StatusCode.DEADLINE_EXCEEDED: 504,
    StatusCode.NOT_FOUND: 404,
    StatusCode.ALREADY_EXISTS: 409,
    StatusCode.PERMISSION_DENIED: 403,
    StatusCode.RESOURCE_EXHAUSTED: 429,
    StatusCode.FAILED_PRECONDITION: 400,
    StatusCode.ABORTED: 409,
    StatusCode.OUT_OF_RANGE: 400,
    StatusCode.UNIMPLEMENTED: 501,
    StatusCode.INTERNAL: 500,
    StatusCode.UNAVAILABLE: 503,
    StatusCode.DATA_LOSS: 500,
    StatusCode.UNAUTHENTICATED: 401,
}


class ServingError(Exception):
    """Base of every error servinglib raises or records; carries one status code.

    Use a subclass (one per code) or :meth:`from_code`.  ``str(error)`` is the
    message alone; ``repr`` adds the code.
    """

    code: ClassVar[StatusCode] = StatusCode.UNKNOWN

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code.name}: {self.message!r})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ServingError):
            return NotImplemented
        return self.code == other.code and self.message == other.message

    def __hash__(self) -> int:
        return hash((self.code, self.message))

    @staticmethod
    def from_code(code: StatusCode, message: str) -> ServingError:
        """The error of the class registered for ``code``."""
        if code is StatusCode.OK:
            raise ValueError("StatusCode.OK is not an error")
        return _CLASS_BY_CODE[code](message)

    @staticmethod
    def wrap(error: BaseException, context: str = "") -> ServingError:
        """``error`` as a ServingError: itself if it is one, else UNKNOWN naming its type.

        ``context`` (e.g. "Loading servable {name: m version: 1} failed") is
        prefixed to the message of a foreign exception; the original is kept as
        ``__cause__``.
        """
        if isinstance(error, ServingError):
            return error
        detail = f"{type(error).__name__}: {error}"
        wrapped = UnknownError(f"{context}: {detail}" if context else detail)
        wrapped.__cause__ = error
        return wrapped


class CancelledError(ServingError):
    """The operation was cancelled, usually by its caller (a client that went away)."""

    code = StatusCode.CANCELLED


class UnknownError(ServingError):
    """An error with no better code, e.g. several models failing for different reasons."""

    code = StatusCode.UNKNOWN


class InvalidArgumentError(ServingError):
    """The caller sent something malformed: a bad request, config or argument (HTTP 400)."""

    code = StatusCode.INVALID_ARGUMENT


class DeadlineExceededError(ServingError):
    """The request's deadline passed before the model answered (HTTP 504)."""

    code = StatusCode.DEADLINE_EXCEEDED


class NotFoundError(ServingError):
    """No such model, version or file; also a version whose load failed for good (HTTP 404)."""

    code = StatusCode.NOT_FOUND


class AlreadyExistsError(ServingError):
    """What the caller tried to create exists already, e.g. a servable id managed twice."""

    code = StatusCode.ALREADY_EXISTS


class PermissionDeniedError(ServingError):
    """Not allowed here, e.g. remote model management while it is off (HTTP 403)."""

    code = StatusCode.PERMISSION_DENIED


class ResourceExhaustedError(ServingError):
    """Out of a bounded resource: RAM for a load, a queue, a size limit (HTTP 429)."""

    code = StatusCode.RESOURCE_EXHAUSTED


class FailedPreconditionError(ServingError):
    """Refused in the current state, e.g. a label to a version not available (HTTP 400)."""

    code = StatusCode.FAILED_PRECONDITION


class AbortedError(ServingError):
    """Given up because of a concurrent change; retrying at a higher level may work."""

    code = StatusCode.ABORTED


class OutOfRangeError(ServingError):
    """A value past the valid range, e.g. reading beyond the end of a file."""

    code = StatusCode.OUT_OF_RANGE


class UnimplementedError(ServingError):
    """Not supported by this server or this servable, e.g. a servable without signatures."""

    code = StatusCode.UNIMPLEMENTED


class InternalError(ServingError):
    """A broken invariant in servinglib or a model: a bug to report (HTTP 500)."""

    code = StatusCode.INTERNAL


class UnavailableError(ServingError):
    """Not serving now but may be soon: loading, unloading, at the in-flight limit (HTTP 503)."""

    code = StatusCode.UNAVAILABLE


class DataLossError(ServingError):
    """Data is corrupt or truncated, e.g. a half-written variables file."""

    code = StatusCode.DATA_LOSS


class UnauthenticatedError(ServingError):
    """The caller's credentials are missing or not valid."""

    code = StatusCode.UNAUTHENTICATED


_CLASS_BY_CODE: dict[StatusCode, type[ServingError]] = {
    cls.code: cls
    for cls in (
        CancelledError,
        UnknownError,
        InvalidArgumentError,
        DeadlineExceededError,
        NotFoundError,
        AlreadyExistsError,
        PermissionDeniedError,
        ResourceExhaustedError,
        FailedPreconditionError,
        AbortedError,
        OutOfRangeError,
        UnimplementedError,
        InternalError,
        UnavailableError,
        DataLossError,
        UnauthenticatedError,
    )
}

MAX_QUOTED_CHARS: Final = 200
"""The most characters of a client's text (a name, a path) a message quotes whole."""

MAX_MESSAGE_BYTES: Final = 2048
"""The most UTF-8 bytes of a message a front end answers with (gRPC's percent-encoded
``grpc-message`` then stays under grpc's 8 KiB metadata limit, so the client sees the code)."""


def shortened(text: str, limit: int = MAX_QUOTED_CHARS) -> str:
    """``text`` whole up to ``limit`` characters, else its first ``limit`` and how many more.

    For text a client chose (a model name, a path) quoted in a message: a
    megabyte of it costs the message ``limit`` characters.
    """
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit} more characters)"


def wrong_type(what: str, expected: str, value: object) -> TypeError:
    """The TypeError for a public call's argument ``what``: it must be ``expected``, and what
    it was instead (request-path callers test a cheap ``isinstance`` first)."""
    return TypeError(f"{what} must be {expected}, not {type(value).__name__}")


def bounded_message(message: str, limit_bytes: int = MAX_MESSAGE_BYTES) -> str:
    """``message`` whole if its UTF-8 holds at most ``limit_bytes``, else cut to fit, saying so.

    The last line of defence of each transport's error mapping: whatever a
    message quotes, the answer stays small.
    """
    encoded = message.encode("utf-8", "surrogatepass")
    if len(encoded) <= limit_bytes:
        return message
    kept = encoded[: limit_bytes - 64].decode("utf-8", "ignore")
    return f"{kept}… (cut: {len(message) - len(kept)} more characters)"
