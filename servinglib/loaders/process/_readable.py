"""Waiting for a model process's socket to be readable, with the wait muted on request."""

from __future__ import annotations

import contextlib
import select
from typing import final


@final
class Readable:
    """A wait on one descriptor that another thread can mute and unmute without waking it.

    :meth:`wait` returns when the descriptor is readable, hung up or in error, unless it
    is muted, when it returns only on a hang-up or an error (the kernel reports those
    always).  Muting works only where ``select.epoll`` exists (Linux), whose waits see a
    change made meanwhile: elsewhere :meth:`mute` returns False and changes nothing.
    Thread-safe: :meth:`wait` on one thread; the others from any.
    """

    def __init__(self, fd: int) -> None:
        self._fd = fd
        epoll = getattr(select, "epoll", None)
        self._epoll: select.epoll | None = epoll() if epoll is not None else None
        if self._epoll is not None:
            self._epoll.register(fd, select.EPOLLIN)

    def wait(self) -> None:
        """Blocks until the descriptor is readable (unmuted), hung up or in error."""
        if self._epoll is None:
            select.select([self._fd], [], [self._fd])
            return
        with contextlib.suppress(InterruptedError):
            self._epoll.poll()

    def mute(self) -> bool:
        """Stops :meth:`wait` returning for readable data (until :meth:`unmute`); False
        where it cannot."""
        if self._epoll is None:
            return False
        try:
            self._epoll.modify(self._fd, 0)
        except (OSError, ValueError):  # closed: the process has gone
            return False
        return True

    def unmute(self) -> None:
        """Lets :meth:`wait` return for readable data again (at once if some is there)."""
        if self._epoll is not None:
            with contextlib.suppress(OSError, ValueError):  # closed: the process has gone
                self._epoll.modify(self._fd, select.EPOLLIN)

    def close(self) -> None:
        """Frees the wait's descriptor.  Requires: nothing waits any more."""
        if self._epoll is not None:
            self._epoll.close()
