"""Which server owns a model's directory in a shared model cache: an ``flock`` on a file in it."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from typing import final

CLAIM_FILE = ".servinglib.lock"
"""The file of a cache directory whose lock says a mirror of some process works in it."""

_PRIVATE = ".private-"


@final
class CacheClaim:
    """A claimed cache directory: :attr:`directory`, :attr:`private` when the shared one was taken.

    Not thread-safe: its mirror calls it under the source's poll.
    """

    def __init__(self, shared: str) -> None:
        """Claims ``shared`` (made if missing), or else a new private directory beside it."""
        fd = _claim(shared)
        self.private = fd is None
        while fd is None:
            prefix = f"{os.path.basename(shared)}{_PRIVATE}"
            private = tempfile.mkdtemp(prefix=prefix, dir=os.path.dirname(shared))
            fd = _claim(private)
            if fd is None:  # a sweep took it in the instant before the claim: another
                continue
            shared = private
        if not self.private:
            _remove_unclaimed_privates(shared)
        self.directory = shared
        self._fd: int | None = fd

    def release(self, *, remove: bool = False) -> None:
        """Gives the directory up (idempotent); a private one, or any with ``remove``, is deleted
        first."""
        if self._fd is None:
            return
        if remove or self.private:
            shutil.rmtree(self.directory, ignore_errors=True)
        os.close(self._fd)  # the lock goes with its file description
        self._fd = None


def _claim(directory: str) -> int | None:
    """The descriptor holding ``directory``'s lock, or None if another file description holds it
    (another server, or another mirror of this one)."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, CLAIM_FILE)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _remove_unclaimed_privates(shared: str) -> None:
    """Removes the private directories beside ``shared`` whose process is gone."""
    parent, prefix = os.path.dirname(shared), f"{os.path.basename(shared)}{_PRIVATE}"
    with os.scandir(parent) as entries:
        privates = [e.path for e in entries if e.name.startswith(prefix)]
    for private in privates:
        if not os.path.exists(os.path.join(private, CLAIM_FILE)):
            continue  # being made right now: its owner claims it next
        with contextlib.suppress(OSError):
            fd = _claim(private)
            if fd is not None:
                shutil.rmtree(private, ignore_errors=True)
                os.close(fd)
