"""TensorFlow's exceptions as servinglib errors, for loads and for calls."""

from __future__ import annotations

import re

from servinglib.errors import (
    DataLossError,
    InvalidArgumentError,
    ServingError,
    StatusCode,
)
from servinglib.loaders.tensorflow._runtime import tensorflow


def load_error(exc: Exception, path: str) -> ServingError:
    """Why ``tf.saved_model.load(path)`` failed, with a code saying whether a retry can help.

    Files of the model that are missing or damaged (TF's NOT_FOUND, a
    truncated variables file) are DATA_LOSS and what TF rejects as invalid is
    INVALID_ARGUMENT: neither is retried.  Other TF codes keep their code;
    anything else is UNKNOWN, so it is retried.
    """
    detail = f"Loading the SavedModel in {path} failed: {_message(exc)}"
    if isinstance(exc, tensorflow().errors.OpError):
        code = StatusCode(exc.error_code)
        if code is StatusCode.NOT_FOUND:
            return DataLossError(detail)
        return ServingError.from_code(code, detail)
    if isinstance(exc, FileNotFoundError | IndexError | EOFError):
        return DataLossError(detail)
    if isinstance(exc, ValueError | TypeError | KeyError):
        return InvalidArgumentError(detail)
    return ServingError.wrap(exc, f"Loading the SavedModel in {path} failed")


def call_error(exc: Exception, signature_name: str) -> ServingError:
    """Why running signature ``signature_name`` failed: TF's code and message.

    An op rejecting its input is INVALID_ARGUMENT, as are inputs the
    function cannot bind (TypeError / ValueError).
    """
    if isinstance(exc, tensorflow().errors.OpError):
        return ServingError.from_code(StatusCode(exc.error_code), _tidy(_message(exc)))
    if isinstance(exc, TypeError | ValueError):
        return InvalidArgumentError(f"Signature '{signature_name}' rejected its inputs: {exc}")
    return ServingError.wrap(exc, f"Signature '{signature_name}' failed")


# What the eager runtime wraps around an op's own message: where the failing node was built
# (stack traces of the process that traced the function) and the internal function's name.
_PREAMBLE = re.compile(
    r"\AGraph execution error:\s*"
    r"(?:Detected at node .*? defined at \(most recent call last\):\n"
    r"(?:<stack traces unavailable>\n|(?:[ \t].*\n)*))?"
)
_FUNCTION_SUFFIX = re.compile(r"\s*\[Op:__inference_[^\]]*\]\Z")


def _tidy(message: str) -> str:
    """TF's message as TF Serving would report it: the op's error and the node it failed in."""
    tidy = _FUNCTION_SUFFIX.sub("", _PREAMBLE.sub("", message))
    return tidy or message


def _message(exc: Exception) -> str:
    message = getattr(exc, "message", None)
    if isinstance(message, str) and message:
        return message
    return f"{type(exc).__name__}: {exc}"
