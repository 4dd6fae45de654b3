"""FileBudget: the open-file limit split between REST connections, gRPC connections and the rest."""

from __future__ import annotations

import os
import resource
from typing import Final, final

import attrs

MAX_RESERVED_FILES: Final = 256
"""Descriptors kept for models, sources, logs and runtimes at most (a quarter of a low limit)."""


@final
@attrs.frozen
class FileBudget:
    """How many connections each front end may hold so that the server keeps some files.

    ``limit``: the process's open-file limit (soft RLIMIT_NOFILE).
    ``rest_connections`` / ``grpc_connections``: the connection bound each
    front end is given (0 for one that is off).  ``reserved``: descriptors
    left for everything else: model files, the sources' listings, log files,
    the runtimes' own.  A server whose connections take every descriptor
    cannot read a new model version, write a log line, or even accept the
    connection that would let it close an idle one.
    Immutable, so thread-safe.
    """

    limit: int
    rest_connections: int
    grpc_connections: int
    reserved: int

    @classmethod
    def split(cls, limit: int, open_now: int, rest_wanted: int, grpc_wanted: int) -> FileBudget:
        """The bounds for ``limit`` files with ``open_now`` open: as wanted, or scaled down.

        ``reserved`` is a quarter of ``limit``, at most :data:`MAX_RESERVED_FILES`.
        What the open descriptors and the reserve leave is shared by the
        front ends in proportion to what they want (``rest_wanted`` /
        ``grpc_wanted``: their flags, 0 for one that is off), each keeping
        at least 1.
        """
        reserved = min(MAX_RESERVED_FILES, limit // 4)
        wanted = rest_wanted + grpc_wanted
        free = limit - open_now - reserved
        if wanted <= free:
            return cls(limit, rest_wanted, grpc_wanted, reserved)
        rest = max(1, free * rest_wanted // wanted) if rest_wanted else 0
        grpc = max(1, free - rest) if grpc_wanted else 0
        return cls(limit, rest, grpc, reserved)

    @classmethod
    def of_this_process(cls, rest_wanted: int, grpc_wanted: int) -> FileBudget:
        """The split of this process's open-file limit, with the descriptors open now."""
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            return cls(soft, rest_wanted, grpc_wanted, MAX_RESERVED_FILES)
        return cls.split(soft, _open_files(), rest_wanted, grpc_wanted)

    def describe(self) -> str:
        """One line for the start's log: the limit and its split."""
        return (
            f"Open files: {self.limit} allowed; REST may hold {self.rest_connections} "
            f"connections, gRPC {self.grpc_connections}, {self.reserved} are kept for models, "
            "sources and logs"
        )


def raise_open_file_limit() -> int:
    """Raises the soft open-file limit to the hard one (as far as the OS lets); the soft limit.

    Connections, models and logs then share all the process may open, not
    the 1,024 most shells start with.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):  # an infinite hard limit (macOS): keep the soft one
            return soft
    return hard


def _open_files() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:  # no /proc (macOS): count nothing, the reserve then covers them
        return 0
