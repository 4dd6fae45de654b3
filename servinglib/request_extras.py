"""What an inference request carries beside its tensors: its id, sequence and parameters.

The KServe V2 front ends set them (:func:`request_extras_scope`) around the call; a model
that reads them (a Triton Python model's ``request.parameters()``) asks :func:`request_extras`.
They travel as the deadline does: a context variable, copied to the thread that runs the call.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, final

import attrs

from servinglib.errors import InvalidArgumentError

ParameterValue = bool | int | float | str


def _frozen(value: Mapping[str, ParameterValue]) -> Mapping[str, ParameterValue]:
    return MappingProxyType(dict(value))


@final
@attrs.frozen
class RequestExtras:
    """A request's ``id`` (empty: none), sequence id (0: none; an int or a str, as the client
    sent it), whether it starts or ends its sequence, parameters (those the protocol
    reserves excluded), and Triton's schedule policy: its ``priority`` (0: the model's
    default) and ``timeout_us`` in its queue (0: the model's).  Immutable, so thread-safe.
    """

    request_id: str = ""
    correlation_id: int | str = 0
    parameters: Mapping[str, ParameterValue] = attrs.field(
        factory=lambda: MappingProxyType({}), converter=_frozen
    )
    sequence_start: bool = False
    sequence_end: bool = False
    priority: int = 0
    timeout_us: int = 0

    def with_parameters(self, more: Mapping[str, ParameterValue]) -> RequestExtras:
        """These extras with ``more`` parameters (replacing those of the same names)."""
        return attrs.evolve(self, parameters={**self.parameters, **more})

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its fields, ``parameters`` as a dict (a model process receives it)."""
        fields = (self.request_id, self.correlation_id, dict(self.parameters))
        flags = (self.sequence_start, self.sequence_end, self.priority, self.timeout_us)
        return (RequestExtras, (*fields, *flags))

    @classmethod
    def of_request(cls, request_id: str, parameters: Mapping[str, ParameterValue]) -> RequestExtras:
        """A V2 request's extras: its ``id`` and ``parameters``, whose ``sequence_id`` is the
        sequence id; the parameters the protocol reserves (:func:`is_reserved`) are left out
        of ``parameters``, as Triton leaves them out; ``sequence_start`` and
        ``sequence_end`` are the sequence's flags, ``priority`` and ``timeout`` (in
        microseconds) the schedule policy's.

        Raises InvalidArgumentError for a ``sequence_start`` or ``sequence_end`` that is not
        a bool, a ``priority`` or ``timeout`` that is not a non-negative integer.
        """
        if not parameters:
            return cls(request_id) if request_id else NO_EXTRAS
        sequence_id = parameters.get("sequence_id", 0)
        correlation_id: int | str = 0
        if isinstance(sequence_id, str | int) and not isinstance(sequence_id, bool):
            correlation_id = sequence_id
        kept = {k: v for k, v in parameters.items() if not is_reserved(k)}
        start = _flag(parameters, "sequence_start")
        end = _flag(parameters, "sequence_end")
        return cls(
            request_id,
            correlation_id,
            kept,
            sequence_start=start,
            sequence_end=end,
            priority=_count(parameters, "priority"),
            timeout_us=_count(parameters, "timeout"),
        )


def _count(parameters: Mapping[str, ParameterValue], name: str) -> int:
    value = parameters.get(name, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidArgumentError(
            f"Parameter '{name}' must be a non-negative integer, not {value!r:.40}"
        )
    return value


def _flag(parameters: Mapping[str, ParameterValue], name: str) -> bool:
    value = parameters.get(name, False)
    if not isinstance(value, bool):
        raise InvalidArgumentError(f"Parameter '{name}' must be a bool, not {value!r:.40}")
    return value


RESERVED_PARAMETERS = frozenset(
    {
        "sequence_id",
        "sequence_start",
        "sequence_end",
        "priority",
        "timeout",
        "binary_data_output",
        "signature_name",
    }
)
"""Request parameters that steer the server (Triton's and servinglib's ``signature_name``),
not the model."""

RESERVED_PREFIX = "triton_"
"""Triton reserves every parameter name with this prefix (``triton_enable_empty_final_response``,
a stream's request for an empty final response, is one)."""


def is_reserved(name: str) -> bool:
    """Whether the request parameter ``name`` steers the server and never reaches the model."""
    return name in RESERVED_PARAMETERS or name.startswith(RESERVED_PREFIX)


NO_EXTRAS = RequestExtras()
"""A request that carries nothing beside its tensors."""

_extras: contextvars.ContextVar[RequestExtras] = contextvars.ContextVar(
    "servinglib_request_extras", default=NO_EXTRAS
)


def request_extras() -> RequestExtras:
    """The current request's extras (:data:`NO_EXTRAS` when its front end set none)."""
    return _extras.get()


def request_extras_scope(extras: RequestExtras) -> contextlib.AbstractContextManager[None]:
    """Makes ``extras`` the current request's inside the ``with`` block.

    A request with no extras sets nothing (the context's own are :data:`NO_EXTRAS` already,
    as each request runs in a context of its own): the common case costs nothing.
    """
    return _NOTHING if extras is NO_EXTRAS else _Scope(extras)


_NOTHING = contextlib.nullcontext()  # reusable: it holds no state


class _Scope:
    """Sets the extras for a ``with`` block.  Not thread-safe (one per ``with``)."""

    __slots__ = ("_extras", "_token")

    def __init__(self, extras: RequestExtras) -> None:
        self._extras = extras

    def __enter__(self) -> None:
        self._token = _extras.set(self._extras)

    def __exit__(self, *_exc: object) -> None:
        _extras.reset(self._token)
