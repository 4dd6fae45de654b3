"""TCP ports for servers a test starts in another process (the CLI, Triton, an object store).

A port found by binding port 0 is free only until the probe closes: the kernel may hand the same
port to any other process binding port 0 before the server binds it, and under pytest-xdist
another worker starting a server does exactly that (a Triton still loading its models once
found its HTTP port answered by another worker's servinglib).  So ports come from below the
kernel's ephemeral range (``ip_local_port_range``, 32768 to 60999 by default), a block of its own
per xdist worker, in turn: nothing binding port 0 is given them, and no two workers share one.
"""

from __future__ import annotations

import itertools
import os
import socket

_FIRST = 10_000
_BLOCK = 2_000  # ports per worker: 11 workers fit below 32768
_WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
_START = _FIRST + _BLOCK * (_WORKER % 11)
_OFFSET = os.getpid() % _BLOCK  # another run's ports may still be in TIME_WAIT
_NEXT = itertools.cycle(_START + (_OFFSET + i) % _BLOCK for i in range(_BLOCK))


def free_port() -> int:
    """A TCP port of 127.0.0.1 that binds now and that no other test worker is given."""
    for _ in range(_BLOCK):
        port = next(_NEXT)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:  # in use, or in TIME_WAIT: the next
                continue
        return port
    raise RuntimeError(f"no free port in {_START}..{_START + _BLOCK - 1}")
