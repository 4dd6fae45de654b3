"""``triton_python_backend_utils``: the module a Triton Python-backend ``model.py`` imports.

While the python platform imports a ``model.py``, ``import triton_python_backend_utils``
gives this module (unless a real one is importable:
:func:`~servinglib.loaders.triton.backend_utils_import.backend_utils_importable`).  It holds
what Triton's Python backend documents: the classes (``Tensor``, ``InferenceRequest``,
``InferenceResponse``, ``TritonError``, ``ModelConfig``, ``Logger``), the helpers of Triton's
own ``triton_python_backend_utils.py`` and its constants.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, final

import numpy as np
import numpy.typing as npt

from servinglib.loaders.triton.pb_model_config import ModelConfig
from servinglib.loaders.triton.pb_request import InferenceRequest, InferenceResponseSender
from servinglib.loaders.triton.pb_types import (
    TRITONSERVER_REQUEST_FLAG_SEQUENCE_END,
    TRITONSERVER_REQUEST_FLAG_SEQUENCE_START,
    TRITONSERVER_REQUEST_RELEASE_ALL,
    TRITONSERVER_REQUEST_RELEASE_RESCHEDULE,
    TRITONSERVER_RESPONSE_COMPLETE_FINAL,
    InferenceResponse,
    Tensor,
    TritonError,
    TritonModelException,
)

__all__ = [
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_END",
    "TRITONSERVER_REQUEST_FLAG_SEQUENCE_START",
    "TRITONSERVER_REQUEST_RELEASE_ALL",
    "TRITONSERVER_REQUEST_RELEASE_RESCHEDULE",
    "TRITONSERVER_RESPONSE_COMPLETE_FINAL",
    "TRITON_STRING_TO_NUMPY",
    "InferenceRequest",
    "InferenceResponse",
    "InferenceResponseSender",
    "Logger",
    "ModelConfig",
    "Tensor",
    "TritonError",
    "TritonModelException",
    "deserialize_bytes_tensor",
    "get_input_config_by_name",
    "get_input_tensor_by_name",
    "get_output_config_by_name",
    "get_output_tensor_by_name",
    "numpy_to_triton_type",
    "serialize_byte_tensor",
    "triton_string_to_numpy",
    "triton_to_numpy_type",
    "using_decoupled_model_transaction_policy",
]

_log = logging.getLogger("servinglib.triton.model")

# Triton's data type numbers (model_config.proto) in order, from TYPE_BOOL (1) to TYPE_STRING.
_NUMPY_TYPES: tuple[type[Any], ...] = (
    np.bool_,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.float16,
    np.float32,
    np.float64,
    np.object_,
)
TRITON_STRING_TO_NUMPY: dict[str, type[Any]] = {
    "TYPE_BOOL": bool,
    **{
        f"TYPE_{name}": numpy_type
        for name, numpy_type in zip(
            ("UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64"),
            _NUMPY_TYPES[1:9],
            strict=True,
        )
    },
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}


@final
class Logger:
    """A model's log: ``Logger.log_info(msg)`` (and warn, error, verbose) into servinglib's log.

    Records go to the ``servinglib.triton.model`` logger; VERBOSE is DEBUG.  Thread-safe.
    """

    INFO: ClassVar[int] = logging.INFO
    WARNING: ClassVar[int] = logging.WARNING
    ERROR: ClassVar[int] = logging.ERROR
    VERBOSE: ClassVar[int] = logging.DEBUG

    @staticmethod
    def log(message: str, level: int = logging.INFO) -> None:
        """Logs ``message`` at ``level`` (one of the class's levels)."""
        _log.log(level, "%s", message)

    @staticmethod
    def log_info(message: str) -> None:
        """Logs ``message`` at INFO."""
        _log.info("%s", message)

    @staticmethod
    def log_warn(message: str) -> None:
        """Logs ``message`` at WARNING."""
        _log.warning("%s", message)

    @staticmethod
    def log_error(message: str) -> None:
        """Logs ``message`` at ERROR."""
        _log.error("%s", message)

    @staticmethod
    def log_verbose(message: str) -> None:
        """Logs ``message`` at DEBUG (Triton's VERBOSE)."""
        _log.debug("%s", message)


def get_input_tensor_by_name(inference_request: InferenceRequest, name: str) -> Tensor | None:
    """The request's input named ``name``, or None."""
    return _named(inference_request.inputs(), name)


def get_output_tensor_by_name(inference_response: InferenceResponse, name: str) -> Tensor | None:
    """The response's output named ``name``, or None."""
    return _named(inference_response.output_tensors(), name)


def get_input_config_by_name(model_config: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    """The ``input`` entry named ``name`` of a model config (a dict), or None."""
    return _config_named(model_config.get("input", ()), name)


def get_output_config_by_name(model_config: Mapping[str, Any], name: str) -> dict[str, Any] | None:
    """The ``output`` entry named ``name`` of a model config (a dict), or None."""
    return _config_named(model_config.get("output", ()), name)


def using_decoupled_model_transaction_policy(model_config: Mapping[str, Any]) -> bool:
    """Whether a model config (a dict) makes the model decoupled."""
    return bool(model_config.get("model_transaction_policy", {}).get("decoupled", False))


def triton_string_to_numpy(triton_type_string: str) -> type[Any]:
    """The numpy type of ``TYPE_FP32`` and the like (KeyError for others)."""
    return TRITON_STRING_TO_NUMPY[triton_type_string]


def triton_to_numpy_type(data_type: int) -> type[Any] | None:
    """The numpy type of a Triton data type number (1: bool ... 13: string), or None."""
    return _NUMPY_TYPES[data_type - 1] if 1 <= data_type <= len(_NUMPY_TYPES) else None


def numpy_to_triton_type(data_type: Any) -> int | None:  # noqa: ANN401 - any numpy dtype-like
    """The Triton data type number of a numpy type, or None."""
    if data_type == np.bytes_:
        return len(_NUMPY_TYPES)
    for number, numpy_type in enumerate(_NUMPY_TYPES, start=1):
        if data_type == numpy_type:
            return number
    return None


def serialize_byte_tensor(input_tensor: npt.NDArray[Any]) -> bytes | tuple[()] | None:
    """A BYTES tensor as Triton's wire form (each item's 4-byte little-endian length, then it).

    ``()`` for an empty tensor, None for a tensor that is not of bytes (as Triton's).
    """
    if input_tensor.size == 0:
        return ()
    if input_tensor.dtype != np.object_ and input_tensor.dtype.type != np.bytes_:
        return None
    parts = []
    for item in input_tensor.flat:
        raw = item if isinstance(item, bytes) else str(item).encode("utf-8")
        parts += [struct.pack("<I", len(raw)), raw]
    return b"".join(parts)


def deserialize_bytes_tensor(encoded_tensor: bytes) -> npt.NDArray[Any]:
    """The items of a BYTES tensor in Triton's wire form, as a 1-D object array of bytes."""
    items = []
    offset = 0
    while offset < len(encoded_tensor):
        (length,) = struct.unpack_from("<I", encoded_tensor, offset)
        offset += 4
        items.append(bytes(encoded_tensor[offset : offset + length]))
        offset += length
    array = np.empty(len(items), dtype=object)
    array[:] = items
    return array


def _named(tensors: Iterable[Tensor], name: str) -> Tensor | None:
    return next((tensor for tensor in tensors if tensor.name() == name), None)


def _config_named(entries: Iterable[dict[str, Any]], name: str) -> dict[str, Any] | None:
    return next((entry for entry in entries if entry.get("name") == name), None)
