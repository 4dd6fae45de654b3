"""Starting model processes, and the spare process kept ready for the next load."""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import socket
import subprocess
import sys
import threading
from multiprocessing.connection import Connection
from typing import final

from servinglib.loaders.process import _wire

_log = logging.getLogger(__name__)

EXIT_TIMEOUT_S = 30.0
"""How long a model process gets to unload and exit after its socket closed, before a kill."""


@final
class Started:
    """A model process, its socket and its connection; it has been told its factory."""

    def __init__(self, process: subprocess.Popen[bytes], sock: socket.socket) -> None:
        self.process = process
        self.socket = sock  # kept to shut its sending side: the process then exits
        self.connection = Connection(os.dup(sock.fileno()))

    def stop(self) -> int | None:
        """Makes the process exit (it reads EOF), waits (kills after EXIT_TIMEOUT_S); its status."""
        with contextlib.suppress(OSError):  # OSError: it has gone already
            self.socket.shutdown(socket.SHUT_WR)
        try:
            status = self.process.wait(EXIT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            _log.error(
                "Model process %d did not exit in %.0f s: killed", self.process.pid, EXIT_TIMEOUT_S
            )
            self.process.kill()
            status = self.process.wait()
        return status

    def close(self) -> None:
        """Closes this end's descriptors.  Requires: nothing reads the connection any more."""
        self.connection.close()
        self.socket.close()


def spawn(factory: str) -> Started:
    """Starts a model process and tells it ``factory``, whose runtime it imports meanwhile."""
    ours, theirs = socket.socketpair()
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "servinglib.loaders.process._child", str(theirs.fileno())],
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
    finally:
        theirs.close()
    started = Started(process, ours)
    with contextlib.suppress(OSError):  # it died at once: the load's receive says so
        _wire.send(started.connection, (_wire.PREPARE, factory, list(sys.path)))
    return started


@final
class SpareProcesses:
    """At most one started, idle model process per factory, for its next load.

    Thread-safe.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spares: dict[str, Started] = {}  # guarded by: _lock

    def take(self, factory: str) -> Started:
        """The spare of ``factory`` if it is alive, else a new process."""
        with self._lock:
            spare = self._spares.pop(factory, None)
        if spare is not None and spare.process.poll() is None:
            return spare
        if spare is not None:
            spare.close()
        return spawn(factory)

    def refill(self, factory: str) -> None:
        """Starts a spare for ``factory`` unless it has one."""
        with self._lock:
            if factory in self._spares:
                return
            self._spares[factory] = spawn(factory)

    def stop(self) -> None:
        """Stops every spare (at interpreter exit; they would also exit with this process)."""
        with self._lock:
            spares, self._spares = list(self._spares.values()), {}
        for spare in spares:
            spare.stop()
            spare.close()


spares = SpareProcesses()
atexit.register(spares.stop)
