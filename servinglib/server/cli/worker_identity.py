"""WorkerIdentity: what a worker process of ``--num_workers`` learns from its supervisor."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import final

import attrs

_INDEX = "SERVINGLIB_WORKER_INDEX"
_DIRECTORY = "SERVINGLIB_WORKER_DIRECTORY"
_READY_FD = "SERVINGLIB_WORKER_READY_FD"


@final
@attrs.frozen
class WorkerIdentity:
    """One worker of a supervised server: its index, the shared directory, its ready pipe.

    Immutable; :meth:`announce_ready` is called once, from the serving thread.
    """

    index: int
    directory: str
    ready_fd: int

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> WorkerIdentity | None:
        """The identity the supervisor gave this process; None in a process started by hand."""
        environ = os.environ if environ is None else environ
        if _INDEX not in environ:
            return None
        return cls(int(environ[_INDEX]), environ[_DIRECTORY], int(environ[_READY_FD]))

    def environ(self) -> dict[str, str]:
        """The environment variables that make a started process this worker."""
        return {
            _INDEX: str(self.index),
            _DIRECTORY: self.directory,
            _READY_FD: str(self.ready_fd),
        }

    def announce_ready(self) -> None:
        """Tells the supervisor this worker serves (a byte on the ready pipe, then closes it)."""
        try:
            os.write(self.ready_fd, b"r")
            os.close(self.ready_fd)
        except OSError:
            pass  # the supervisor is gone: the worker is stopped with it
