"""Text-format files: TF Serving's (models.config, batching, platform, ...), Triton's config.pbtxt.

One reader for all of them, so the same fault gets the same code and the
same message shape wherever it is: a missing file NOT_FOUND, an unreadable
one PERMISSION_DENIED, a directory or text that is not UTF-8
INVALID_ARGUMENT, other I/O errors UNAVAILABLE, and text that does not parse
INVALID_ARGUMENT with its line and column.  protobuf is imported when a
file is parsed, never by importing this module.
"""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, TypeVar

from servinglib.errors import (
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    UnavailableError,
)

if TYPE_CHECKING:
    from google.protobuf.message import Message

M = TypeVar("M", bound="Message")

_PARSER_POSITION = re.compile(r"^\d+:\d+ : ")  # the parser's own "3:7 : " prefix
# Users know TF Serving's and Triton's message names, not our packages.
_OUR_PROTO_PACKAGES = re.compile(r"servinglib\.(?:tfs|triton)\.")


def read_text_file(path: str | os.PathLike[str], what: str) -> str:
    """The text of the ``what`` file at ``path`` (UTF-8; a byte-order mark is dropped).

    Raises NotFoundError (missing), PermissionDeniedError (unreadable),
    InvalidArgumentError (a directory, or not UTF-8), UnavailableError
    (other I/O errors), each naming ``what`` and the path.
    """
    return decode_text(read_bytes(path, what), path, what)


def read_bytes(path: str | os.PathLike[str], what: str) -> bytes:
    """The bytes of the ``what`` file at ``path``; raises as :func:`read_text_file`."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as file:
            return file.read()
    except FileNotFoundError:
        raise NotFoundError(f"The {what} file {path} was not found") from None
    except PermissionError as error:
        raise PermissionDeniedError(f"Cannot read the {what} file {path}: {error}") from None
    except IsADirectoryError:
        raise InvalidArgumentError(f"The {what} file {path} is a directory") from None
    except OSError as error:
        raise UnavailableError(f"Cannot read the {what} file {path}: {error}") from None


def decode_text(content: bytes, path: str | os.PathLike[str], what: str) -> str:
    """``content`` as text; InvalidArgumentError naming the file if it is not UTF-8."""
    try:
        # utf-8-sig: a byte-order mark some editors write is dropped, not a syntax error.
        return content.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise InvalidArgumentError(
            f"The {what} file {os.fspath(path)} is not UTF-8 text: {error}"
        ) from None


def parse_text(text: str, message: M, what: str, source: str = "") -> M:
    """``text`` parsed into ``message`` (TF Serving's text format), which it returns.

    Unknown fields and a non-repeated field given twice are errors.  Raises
    InvalidArgumentError: "Invalid <what> in <source>: line L, column C: <detail>"
    (without `` in <source>`` when ``source`` is empty).
    """
    from google.protobuf import text_format

    try:
        text_format.Parse(text, message)
    except text_format.ParseError as error:
        detail = _OUR_PROTO_PACKAGES.sub("", _PARSER_POSITION.sub("", str(error)))
        line, column = error.GetLine(), error.GetColumn()
        where = f"line {line}, column {column}: " if line is not None else ""
        place = f" in {source}" if source else ""
        raise InvalidArgumentError(f"Invalid {what}{place}: {where}{detail}") from None
    return message
