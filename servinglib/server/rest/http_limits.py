"""HttpLimits: what one REST connection may hold of the server (header bytes, time, a slot)."""

from __future__ import annotations

import os
import resource
from typing import Final, final

import attrs

# File descriptors kept for everything but REST connections (gRPC, model files, logs) when
# the open-file limit lowers the connection cap.
_FDS_KEPT_FREE: Final = 64


@final
@attrs.frozen
class HttpLimits:
    """Bounds that keep idle, slow and oversized HTTP clients from exhausting the REST server.

    Each field, its default and unit: docs/guides/rest.md ("Connection
    limits").  Past ``max_header_bytes`` a request is answered 431; past
    ``request_read_timeout_s`` 408; a connection idle ``idle_timeout_s`` is
    closed; past ``max_connections`` (see :meth:`connection_cap`) the
    longest-idle connection is closed, or 503 if all are in a request.
    Immutable, so thread-safe.
    """

    max_header_bytes: int = attrs.field(default=64 << 10, validator=attrs.validators.gt(0))
    idle_timeout_s: float = attrs.field(default=5.0, validator=attrs.validators.gt(0))
    request_read_timeout_s: float = attrs.field(default=60.0, validator=attrs.validators.gt(0))
    max_connections: int = attrs.field(default=1000, validator=attrs.validators.gt(0))

    def connection_cap(self) -> int:
        """``max_connections``, lowered so that connections cannot exhaust the open-file limit.

        The limit is the process's soft RLIMIT_NOFILE less the descriptors open
        now and 64 kept for the rest of the server (at least 1): a server that
        runs out of descriptors stops accepting at all, and nothing can then
        free an idle connection for a new one.
        """
        soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            return self.max_connections
        return max(1, min(self.max_connections, soft - _open_fds() - _FDS_KEPT_FREE))


def _open_fds() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:  # no /proc (macOS): count nothing, the cap is then max_connections or less
        return 0
