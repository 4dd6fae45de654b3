"""Credential: the value a restricted API group requires, given or read from a file."""

from __future__ import annotations

import hmac
import logging
import os
import time
from collections.abc import Callable
from typing import Final, final

_log = logging.getLogger(__name__)

_FILE_PREFIX = "@"
_MAX_FILE_BYTES = 64 << 10  # a token file larger than this is not a token

_FileKey = tuple[int, int, int, int, int]

RECHECK_INTERVAL_S: Final = 1.0
"""How often a credential file is looked at (``stat``), at most: a rotated file counts from
the first request this long after the last look."""


@final
class Credential:
    """The secret a request must present: a fixed value, or the text of a file.

    :meth:`parse` reads flag syntax: ``VALUE``, or ``@PATH`` for the stripped
    text of the file at ``PATH``, re-read when the file changed (a replaced
    file, as Kubernetes rotates a mounted secret, or one rewritten in place):
    a request looks at the file (one ``stat``) when ``recheck_interval_s``
    passed since the last look, by ``clock``.  (Not every request: a system
    call releases the GIL, and taking it back on the event loop thread costs
    far more than the call.)  A file that cannot be read,
    or holds nothing, matches no request (it fails closed) and is logged
    once per change; the secret itself is never logged, nor shown by ``repr``.
    Thread-safe: the file's value is published as one immutable tuple.
    """

    def __init__(
        self,
        value: str | None = None,
        *,
        path: str | None = None,
        recheck_interval_s: float = RECHECK_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if (value is None) == (path is None):
            raise ValueError("A credential is a value or a file's path, one of the two")
        if value is not None and not value:
            raise ValueError("A credential's value must not be empty")
        self._path = path
        self._fixed = value.encode("utf-8") if value is not None else b""
        # (the file's identity and times, its value); swapped whole.
        self._read: tuple[_FileKey | None, bytes] = (None, b"")
        self._recheck_interval_s = recheck_interval_s
        self._clock = clock
        self._next_look = 0.0  # by clock; a stale value only means one more look
        if path is not None:
            self._look()

    @classmethod
    def parse(
        cls,
        text: str,
        *,
        recheck_interval_s: float = RECHECK_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> Credential:
        """``VALUE``, or ``@PATH``: the file's text (see the class docstring).

        Raises ValueError for an empty value, OSError naming the path for a
        file that cannot be read at start.
        """
        if text.startswith(_FILE_PREFIX):
            path = text[len(_FILE_PREFIX) :]
            if not path:
                raise ValueError("'@' must be followed by the path of the credential's file")
            with open(path, "rb"):  # unreadable at start: the operator hears it now
                pass
            return cls(path=path, recheck_interval_s=recheck_interval_s, clock=clock)
        return cls(text)

    @property
    def path(self) -> str | None:
        """The file the value is read from, or None for a fixed value."""
        return self._path

    def matches(self, presented: bytes) -> bool:
        """Whether ``presented`` is the credential, compared in constant time."""
        expected = self._fixed if self._path is None else self._current()
        # compare_digest's time depends on the lengths only, never on where bytes differ.
        return hmac.compare_digest(presented, expected) and bool(expected)

    def _current(self) -> bytes:
        if self._clock() < self._next_look:
            return self._read[1]
        return self._look()

    def _look(self) -> bytes:
        assert self._path is not None
        self._next_look = self._clock() + self._recheck_interval_s
        key, value = self._read
        try:
            status = os.stat(self._path)
        except OSError as error:
            if key is not None:  # it was readable: say so once
                self._failed(f"cannot be read ({error.strerror})")
            self._read = (None, b"")
            return b""
        now = (status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns, status.st_ctime_ns)
        if now == key:
            return value
        value = self._read_file()
        self._read = (now, value)
        return value

    def _read_file(self) -> bytes:
        assert self._path is not None
        try:
            with open(self._path, "rb") as file:
                value = file.read(_MAX_FILE_BYTES + 1)
        except OSError as error:
            self._failed(f"cannot be read ({error.strerror})")
            return b""
        if len(value) > _MAX_FILE_BYTES:
            self._failed(f"is larger than {_MAX_FILE_BYTES} bytes")
            return b""
        value = value.strip()
        if not value:
            self._failed("is empty")
        return value

    def _failed(self, why: str) -> None:
        _log.warning(
            "The credential file %s %s: requests needing it are refused until it can be read",
            self._path,
            why,
        )

    def __repr__(self) -> str:
        return f"Credential(path={self._path!r})" if self._path else "Credential(<value>)"
