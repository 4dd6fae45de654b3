"""The values of Triton's Python-backend API: ``Tensor``, ``TritonError``, ``InferenceResponse``.

Written as Triton's Python backend documents them (its ``pb_utils`` classes are C++ there);
:mod:`servinglib.loaders.triton.pb_utils` re-exports them under their Triton names.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, ClassVar, final

import numpy as np
import numpy.typing as npt

from servinglib.errors import ServingError, StatusCode

TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2

_TRITON_DTYPE_NAMES = {
    "b": "TYPE_BOOL",
    "u1": "TYPE_UINT8",
    "u2": "TYPE_UINT16",
    "u4": "TYPE_UINT32",
    "u8": "TYPE_UINT64",
    "i1": "TYPE_INT8",
    "i2": "TYPE_INT16",
    "i4": "TYPE_INT32",
    "i8": "TYPE_INT64",
    "f2": "TYPE_FP16",
    "f4": "TYPE_FP32",
    "f8": "TYPE_FP64",
    "O": "TYPE_STRING",
    "S": "TYPE_STRING",
}


class TritonModelException(Exception):  # noqa: N818 - Triton's name, which models catch and raise
    """What a model raises to fail every request of an ``execute`` call (Triton's name)."""


@final
class _ErrorCode(enum.IntEnum):
    """Triton's ``TRITONSERVER_Error_Code``, as ``TritonError.<NAME>`` gives it."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7


# Triton's own gRPC mapping of its error codes (UNSUPPORTED is UNIMPLEMENTED there too).
_STATUS_CODES = {
    _ErrorCode.UNKNOWN: StatusCode.UNKNOWN,
    _ErrorCode.INTERNAL: StatusCode.INTERNAL,
    _ErrorCode.NOT_FOUND: StatusCode.NOT_FOUND,
    _ErrorCode.INVALID_ARG: StatusCode.INVALID_ARGUMENT,
    _ErrorCode.UNAVAILABLE: StatusCode.UNAVAILABLE,
    _ErrorCode.UNSUPPORTED: StatusCode.UNIMPLEMENTED,
    _ErrorCode.ALREADY_EXISTS: StatusCode.ALREADY_EXISTS,
    _ErrorCode.CANCELLED: StatusCode.CANCELLED,
}

_TRITON_CODES = {status: code for code, status in _STATUS_CODES.items()}


@final
class TritonError:
    """An error a model puts in one response: ``TritonError(message, code=TritonError.INTERNAL)``.

    Not an exception, as in Triton: a response carrying it fails its request only.
    Immutable, so thread-safe.
    """

    UNKNOWN: ClassVar[_ErrorCode] = _ErrorCode.UNKNOWN
    INTERNAL: ClassVar[_ErrorCode] = _ErrorCode.INTERNAL
    NOT_FOUND: ClassVar[_ErrorCode] = _ErrorCode.NOT_FOUND
    INVALID_ARG: ClassVar[_ErrorCode] = _ErrorCode.INVALID_ARG
    UNAVAILABLE: ClassVar[_ErrorCode] = _ErrorCode.UNAVAILABLE
    UNSUPPORTED: ClassVar[_ErrorCode] = _ErrorCode.UNSUPPORTED
    ALREADY_EXISTS: ClassVar[_ErrorCode] = _ErrorCode.ALREADY_EXISTS
    CANCELLED: ClassVar[_ErrorCode] = _ErrorCode.CANCELLED

    def __init__(self, message: str, code: int = _ErrorCode.INTERNAL) -> None:
        self._message = str(message)
        self._code = _ErrorCode(code)

    def message(self) -> str:
        """The message the client gets."""
        return self._message

    def code(self) -> int:
        """The code, one of ``TritonError.<NAME>``."""
        return self._code

    @classmethod
    def of_serving_error(cls, error: ServingError) -> TritonError:
        """``error`` as a model reads it on a BLS response: Triton's code for its status code
        (INTERNAL for a code Triton's errors do not have), its message."""
        return cls(error.message, _TRITON_CODES.get(error.code, _ErrorCode.INTERNAL))

    def as_serving_error(self) -> ServingError:
        """This error as servinglib's, its code mapped as Triton maps it to gRPC's."""
        return ServingError.from_code(_STATUS_CODES[self._code], self._message)

    def __repr__(self) -> str:
        return f"TritonError({self._message!r}, TritonError.{self._code.name})"


@final
class Tensor:
    """A named tensor: ``Tensor(name, numpy_array)``; ``as_numpy()`` gives the array back.

    BYTES tensors are numpy object arrays of ``bytes`` (``str`` items are sent as UTF-8).
    Thread-safe as its array is.
    """

    def __init__(self, name: str, data: npt.NDArray[Any]) -> None:
        if not isinstance(data, np.ndarray):
            raise TritonModelException(
                f"Tensor '{name}' takes a numpy array, not {type(data).__name__}"
            )
        if data.dtype.kind not in "biufOS":
            raise TritonModelException(
                f"Tensor '{name}': numpy dtype {data.dtype} is not supported"
            )
        self._name = name
        self._data = data

    def name(self) -> str:
        """The tensor's name."""
        return self._name

    def as_numpy(self) -> npt.NDArray[Any]:
        """The tensor's values (the request's own array for an input: do not change it)."""
        return self._data

    def shape(self) -> list[int]:
        """The tensor's shape."""
        return list(self._data.shape)

    def triton_dtype(self) -> str:
        """The Triton type of the tensor (``TYPE_FP32``, ...)."""
        kind = self._data.dtype.kind
        return _TRITON_DTYPE_NAMES[kind if kind in "bOS" else f"{kind}{self._data.dtype.itemsize}"]

    def is_cpu(self) -> bool:
        """Always True: servinglib's tensors live in host memory."""
        return True

    def __repr__(self) -> str:
        return f"Tensor({self._name!r}, shape={self.shape()}, {self.triton_dtype()})"


@final
class InferenceResponse:
    """One response: its output tensors, or an error (``error=TritonError(...)``).

    ``parameters`` (str → bool, int or str) are read back as JSON by :meth:`parameters`;
    the V2 front ends send them as the response's ``parameters``.
    Immutable once made, so thread-safe.
    """

    def __init__(
        self,
        output_tensors: Sequence[Tensor] | None = None,
        error: TritonError | None = None,
        parameters: Mapping[str, bool | int | str] | None = None,
    ) -> None:
        tensors = list(output_tensors or ())
        for tensor in tensors:
            if not isinstance(tensor, Tensor):
                raise TritonModelException(
                    f"InferenceResponse takes pb_utils.Tensor outputs, not {type(tensor).__name__}"
                )
        if error is not None and not isinstance(error, TritonError):
            raise TritonModelException(
                f"InferenceResponse's error must be a TritonError, not {type(error).__name__}"
            )
        self._tensors = tensors
        self._error = error
        self._parameters = dict(parameters or {})

    def output_tensors(self) -> list[Tensor]:
        """The output tensors (ignored when :meth:`has_error`)."""
        return list(self._tensors)

    def has_error(self) -> bool:
        """True when the response carries an error."""
        return self._error is not None

    def error(self) -> TritonError | None:
        """The error, or None."""
        return self._error

    def parameters(self) -> str:
        """The response's parameters as a JSON object."""
        return json.dumps(self._parameters)


def response_parameters(response: InferenceResponse) -> Mapping[str, bool | int | str]:
    """The parameters ``response`` was made with (servinglib's, not Triton's API)."""
    return MappingProxyType(response._parameters)  # noqa: SLF001 - this module's own class
