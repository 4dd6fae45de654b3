"""The threads and file descriptors a process holds, for the leak checks of check_loader."""

from __future__ import annotations

import collections
import gc
import os
import re
import threading
import time
from collections.abc import Iterable, Mapping

import attrs

_TASKS = "/proc/self/task"
_FDS = "/proc/self/fd"
_INODE = re.compile(r":\[\d+\]$")  # "socket:[1234]" is a socket, whichever one
_NUMBER = re.compile(r"\d+")  # "Thread-7 (poll)" and "Thread-8 (poll)" are one kind
_SHOWN = 3  # kinds of thread or descriptor named in a message
_POLL_S = 0.02  # how often a native thread count is looked at again while it settles


@attrs.frozen
class Holdings:
    """What the process held at one moment: its threads and open file descriptors.

    ``native_threads`` counts every thread, also those Python does not know
    (started by C libraries); None where /proc is missing, as ``fds``
    (descriptor → what it is open on).  Immutable.
    """

    threads: frozenset[threading.Thread]
    native_threads: int | None
    fds: Mapping[int, str] | None

    @classmethod
    def now(cls) -> Holdings:
        """What the process holds now, after a full garbage collection (which may close files)."""
        gc.collect()
        return cls(frozenset(threading.enumerate()), _native_threads(), _open_fds())


def thread_leak(before: Holdings, allowed: int, settle_s: float) -> str | None:
    """The threads started since ``before`` still running, if more than ``allowed``, in words.

    Threads that end by themselves get ``settle_s`` to do so: new Python
    threads are joined, the native count is looked at again until it is
    within ``allowed`` or the time is up.  E.g. "19 more threads
    ('Thread-N (poll)' x 19)"; None when within ``allowed``.
    """
    deadline = time.monotonic() + settle_s
    while True:
        started = [t for t in threading.enumerate() if t not in before.threads]
        growth = len(started)
        native = _native_threads()
        if native is not None and before.native_threads is not None:
            growth = max(growth, native - before.native_threads)
        remaining = deadline - time.monotonic()
        if growth <= allowed:
            return None
        if remaining <= 0:
            names = _counted(_NUMBER.sub("N", t.name) for t in started) or "none from Python"
            return f"{growth} more threads ({names})"
        if started:
            for thread in started:
                thread.join(max(0.0, deadline - time.monotonic()))
        else:
            time.sleep(min(_POLL_S, remaining))  # native threads cannot be joined: look again


def fd_leak(before: Holdings, allowed: int) -> str | None:
    """The file descriptors opened since ``before`` still open, if more than ``allowed``, in words.

    E.g. "19 more file descriptors (/tmp/m/1/weights.bin x 19)"; None when
    within ``allowed`` or where /proc is missing.
    """
    gc.collect()
    now = _open_fds()
    if now is None or before.fds is None:
        return None
    growth = len(now) - len(before.fds)
    if growth <= allowed:
        return None
    opened = (target for fd, target in now.items() if before.fds.get(fd) != target)
    return f"{growth} more file descriptors ({_counted(_INODE.sub('', t) for t in opened)})"


def _native_threads() -> int | None:
    try:
        return len(os.listdir(_TASKS))
    except OSError:
        return None


def _open_fds() -> dict[int, str] | None:
    try:
        names = os.listdir(_FDS)
    except OSError:
        return None
    fds = {}
    for name in names:
        try:
            fds[int(name)] = os.readlink(f"{_FDS}/{name}")
        except OSError:  # closed meanwhile, e.g. the descriptor listdir itself used
            continue
    return fds


def _counted(names: Iterable[str]) -> str:
    """The most common names with their counts: "'a' x 3, 'b' x 1 and 2 more"."""
    counts = collections.Counter(names).most_common()
    shown = ", ".join(f"{name!r} x {count}" for name, count in counts[:_SHOWN])
    hidden = len(counts) - _SHOWN
    return shown + (f" and {hidden} more" if hidden > 0 else "")
