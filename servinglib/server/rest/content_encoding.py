"""decode_body: a request body's ``Content-Encoding`` undone, within the body size limit."""

from __future__ import annotations

import zlib
from typing import Final

from servinglib.errors import InvalidArgumentError

_WINDOW: Final = {
    "gzip": 16 + zlib.MAX_WBITS,  # a gzip header and trailer
    "x-gzip": 16 + zlib.MAX_WBITS,
    "deflate": zlib.MAX_WBITS,  # a zlib stream (RFC 9110's "deflate")
}
_CHUNK: Final = 1 << 20


class UnsupportedEncodingError(Exception):
    """A ``Content-Encoding`` the server cannot decode (answered with 415)."""


class DecodedTooLargeError(Exception):
    """A body that decodes past the limit (answered with 413)."""


def decode_body(body: bytes, encoding: str, limit: int) -> bytes:
    """``body`` with ``encoding`` (the header's value, codings in the order applied) undone.

    Raises UnsupportedEncodingError naming a coding other than gzip,
    deflate or identity; DecodedTooLargeError once the decoded bytes pass
    ``limit``; InvalidArgumentError for a body that is not what its coding
    says.  Thread-safe (no shared state).
    """
    codings = [c.strip().lower() for c in encoding.split(",") if c.strip()]
    for coding in reversed(codings):
        if coding == "identity":
            continue
        window = _WINDOW.get(coding)
        if window is None:
            raise UnsupportedEncodingError(
                f"Content-Encoding {coding[:40]!r} is not supported (use gzip, deflate or none)"
            )
        body = _inflate(body, window, limit, coding)
    return body


def _inflate(body: bytes, window: int, limit: int, coding: str) -> bytes:
    inflater = zlib.decompressobj(window)
    parts: list[bytes] = []
    size = 0
    pending = body
    try:
        while True:
            part = inflater.decompress(pending, _CHUNK)
            size += len(part)
            if size > limit:
                raise DecodedTooLargeError(
                    f"The request body decodes to more than the limit of {limit} bytes"
                )
            parts.append(part)
            pending = inflater.unconsumed_tail
            if not pending:
                break
        tail = inflater.flush()
    except zlib.error as error:
        raise InvalidArgumentError(f"The request body is not valid {coding}: {error}") from None
    if not inflater.eof or inflater.unused_data:
        raise InvalidArgumentError(f"The request body is not one complete {coding} stream")
    if size + len(tail) > limit:
        raise DecodedTooLargeError(
            f"The request body decodes to more than the limit of {limit} bytes"
        )
    parts.append(tail)
    return b"".join(parts)
