"""What an inference answer carries beside its tensors: the response parameters and headers a
model sets.

A KServe V2 front end opens a :func:`response_extras_scope` around the call and sends what the
model set there as the V2 response's ``parameters``, and the headers as the HTTP response's
headers (REST) or the call's trailing metadata (gRPC); a model sets them with
:func:`set_response_parameters` and :func:`set_response_headers` (a Triton Python model gives
its parameters to its ``pb_utils.InferenceResponse``).  The scope's holder travels in a
context variable, which is copied to the thread that runs the call: the copy refers to the
same holder, so what a call on a pool thread sets is what the front end reads once the call
has returned.
"""

from __future__ import annotations

import contextlib
import contextvars
import re
import threading
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final, final

from servinglib.request_extras import RESERVED_PREFIX, ParameterValue

RESERVED_RESPONSE_PARAMETERS: Final = frozenset({"binary_data_size"})
"""Response parameter names the protocol gives a meaning (besides every ``triton_`` name, such
as a stream's ``triton_final_response``): a model cannot set them."""

MAX_RESPONSE_PARAMETERS: Final = 256
"""How many parameters one response carries at most (a bound on what a model can add)."""

MAX_RESPONSE_HEADERS: Final = 64
"""How many headers a model adds to one response at most."""

MAX_HEADER_VALUE_BYTES: Final = 8192
"""The longest value of a header a model adds."""

RESERVED_RESPONSE_HEADERS: Final = frozenset(
    {"content-length", "content-type", "transfer-encoding", "connection", "date", "server", "te"}
)
"""Headers the server writes itself (and every ``grpc-`` one): a model cannot set them."""

_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9a-z]+")  # RFC 9110's token, lower-case

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_NONE: Final[Mapping[str, str]] = MappingProxyType({})  # what most responses carry


def is_reserved_response_parameter(name: str) -> bool:
    """Whether the response parameter ``name`` is the protocol's, never a model's."""
    return name in RESERVED_RESPONSE_PARAMETERS or name.startswith(RESERVED_PREFIX)


@final
class ResponseExtras:
    """The parameters a model set for the response to its request (empty: none).

    Thread safety: thread-safe (a call running on a pool thread sets, the front end reads
    after the call returned).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._parameters: dict[str, ParameterValue] = {}  # guarded by: _lock
        self._headers: dict[str, str] = {}  # guarded by: _lock

    def set_parameters(self, parameters: Mapping[str, ParameterValue]) -> None:
        """Adds ``parameters`` (replacing those of the same names).

        Raises ValueError, setting none of them, for a name that is not a non-empty string
        or is reserved (:func:`is_reserved_response_parameter`), a value that is not a bool,
        int (of 64 bits), float or str, or past :data:`MAX_RESPONSE_PARAMETERS` in all.
        """
        checked = dict(parameters)
        for name, value in checked.items():
            if not isinstance(name, str) or not name:
                raise ValueError(f"A response parameter's name must be a string, not {name!r:.40}")
            if is_reserved_response_parameter(name):
                raise ValueError(f"Response parameter '{name:.80}' is reserved by the protocol")
            if not isinstance(value, bool | int | float | str):
                raise ValueError(
                    f"Response parameter '{name:.80}' must be a bool, int, float or str, "
                    f"not {type(value).__name__}"
                )
            if isinstance(value, int) and not _INT64_MIN <= value <= _INT64_MAX:
                raise ValueError(f"Response parameter '{name:.80}' is not a 64-bit integer")
        with self._lock:
            if len(self._parameters.keys() | checked.keys()) > MAX_RESPONSE_PARAMETERS:
                raise ValueError(f"A response carries at most {MAX_RESPONSE_PARAMETERS} parameters")
            self._parameters.update(checked)

    def parameters(self) -> Mapping[str, ParameterValue]:
        """A snapshot of the parameters set so far."""
        with self._lock:
            return MappingProxyType(dict(self._parameters)) if self._parameters else _NONE

    def set_headers(self, headers: Mapping[str, str]) -> None:
        """Adds response ``headers`` (names lower-cased; replacing those of the same names).

        Raises ValueError, setting none of them, for a name that is not an HTTP token, one
        the server writes itself (:data:`RESERVED_RESPONSE_HEADERS`, ``grpc-...``, ``-bin``),
        a value that is not text of printable characters (no CR, LF or NUL) within
        :data:`MAX_HEADER_VALUE_BYTES`, or past :data:`MAX_RESPONSE_HEADERS` in all.
        """
        checked: dict[str, str] = {}
        for name, value in dict(headers).items():
            key = name.lower() if isinstance(name, str) else ""
            if not _TOKEN.fullmatch(key):
                raise ValueError(
                    f"A response header's name must be an HTTP token, not {name!r:.40}"
                )
            if key in RESERVED_RESPONSE_HEADERS or key.startswith("grpc-") or key.endswith("-bin"):
                raise ValueError(f"Response header '{key:.80}' is the server's to write")
            if not isinstance(value, str) or any(c in value for c in "\r\n\0"):
                raise ValueError(f"Response header '{key:.80}' must be text of one line")
            if len(value.encode("utf-8")) > MAX_HEADER_VALUE_BYTES:
                raise ValueError(f"Response header '{key:.80}' is longer than 8 KiB")
            checked[key] = value
        with self._lock:
            if len(self._headers.keys() | checked.keys()) > MAX_RESPONSE_HEADERS:
                raise ValueError(f"A model adds at most {MAX_RESPONSE_HEADERS} response headers")
            self._headers.update(checked)

    def headers(self) -> Mapping[str, str]:
        """A snapshot of the headers set so far."""
        with self._lock:
            return MappingProxyType(dict(self._headers)) if self._headers else _NONE


_holder: contextvars.ContextVar[ResponseExtras | None] = contextvars.ContextVar(
    "servinglib_response_extras", default=None
)


def response_extras_scope() -> contextlib.AbstractContextManager[ResponseExtras]:
    """A new holder of the current request's response extras inside the ``with`` block."""
    return _Scope()


@final
class _Scope:
    """Sets a new holder for a ``with`` block (on every V2 request: a class, not a
    generator).  Not thread-safe (one per ``with``)."""

    __slots__ = ("_token",)

    def __enter__(self) -> ResponseExtras:
        holder = ResponseExtras()
        self._token = _holder.set(holder)
        return holder

    def __exit__(self, *_exc: object) -> None:
        _holder.reset(self._token)


def current_response_extras() -> ResponseExtras | None:
    """The current request's holder; None when no front end listens (an embedded call, a
    shadow copy, a call in a model process)."""
    return _holder.get()


def set_response_parameters(parameters: Mapping[str, ParameterValue]) -> None:
    """Sets parameters of the current request's V2 response (``parameters`` of its JSON or
    of its ``ModelInferResponse``), replacing those of the same names; where no front end
    listens (:func:`current_response_extras` is None) they are dropped.

    Raises ValueError as :meth:`ResponseExtras.set_parameters` does.
    """
    holder = _holder.get()
    if holder is None:
        ResponseExtras().set_parameters(parameters)  # the same checks, wherever it runs
        return
    holder.set_parameters(parameters)


def set_response_headers(headers: Mapping[str, str]) -> None:
    """Adds headers to the current request's response: HTTP headers over REST, trailing
    metadata over gRPC (V2 inference); where no front end listens they are dropped.

    Raises ValueError as :meth:`ResponseExtras.set_headers` does.
    """
    holder = _holder.get()
    if holder is None:
        ResponseExtras().set_headers(headers)  # the same checks, wherever it runs
        return
    holder.set_headers(headers)
