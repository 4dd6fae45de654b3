"""MemoryTrimmer: gives the heap memory large requests leave behind back to the OS."""

from __future__ import annotations

import ctypes
import logging
import os
from collections.abc import Callable, MutableMapping
from typing import Final, final

from servinglib.core.clock import Clock, SystemClock

_log = logging.getLogger(__name__)

_STATM: Final = "/proc/self/statm"
_MIB: Final = 1 << 20


@final
class MemoryTrimmer:
    """Calls glibc's ``malloc_trim(0)`` when the process's RSS has grown past its floor.

    The floor is the lowest RSS seen after a trim (at first: at construction,
    so make the trimmer once the models are loaded).  A check finds the RSS
    ``growth_bytes`` above the floor and trims.  A trim that gives back little
    (the memory is in use, e.g. a model loaded since) makes the next checks
    wait, doubling up to ``max_backoff_s``; one that gives back much ends the
    wait.  :attr:`available` is False without glibc's ``malloc_trim`` or
    ``/proc/self/statm`` (musl, macOS): :meth:`trim_if_grown` then does nothing.
    Thread safety: call :meth:`trim_if_grown` from one thread at a time (any
    thread; glibc's trim itself is thread-safe).
    """

    def __init__(
        self,
        growth_bytes: int = 64 * _MIB,
        *,
        max_backoff_s: float = 64.0,
        clock: Clock | None = None,
    ) -> None:
        self._growth_bytes = growth_bytes
        self._max_backoff_s = max_backoff_s
        self._clock = clock or SystemClock()
        self._trim = _malloc_trim()
        self._page_size = os.sysconf("SC_PAGE_SIZE")
        self._floor = self._resident_bytes() if self._trim is not None else None
        self._backoff_s = 0.0
        self._next_check = 0.0

    @property
    def available(self) -> bool:
        """Whether trims can run here."""
        return self._floor is not None

    def trim_if_grown(self) -> int | None:
        """Trims if the RSS is ``growth_bytes`` above the floor; the bytes released, or None.

        None when no trim ran (no growth, or waiting after trims that gave back
        little).  glibc walks the heap with the GIL released (ctypes releases
        it), so other threads go on; call it off the event loop.
        """
        now = self._clock.now()
        if self._trim is None or self._floor is None or now < self._next_check:
            return None
        before = self._resident_bytes()
        if before is None or before < self._floor + self._growth_bytes:
            return None
        self._trim(0)
        after = self._resident_bytes() or before
        released = before - after
        self._floor = min(self._floor, after)
        if released < self._growth_bytes // 4:
            self._backoff_s = min(self._max_backoff_s, max(1.0, 2 * self._backoff_s))
        else:
            self._backoff_s = 0.0
        self._next_check = now + self._backoff_s
        _log.debug("malloc_trim: RSS %d MiB -> %d MiB", before // _MIB, after // _MIB)
        return released

    def _resident_bytes(self) -> int | None:
        try:
            with open(_STATM, "rb") as statm:
                return int(statm.read().split()[1]) * self._page_size
        except OSError:
            return None


MALLOC_ENVIRONMENT: Final = {"TF_ONEDNN_USE_SYSTEM_ALLOCATOR": "1"}
"""The settings that make the model runtimes allocate through malloc, where a trim reaches."""


def allocate_runtimes_through_malloc(environ: MutableMapping[str, str] | None = None) -> None:
    """Sets :data:`MALLOC_ENVIRONMENT` in ``environ`` (the process's), where not set already.

    TensorFlow reads it at its first large tensor; model processes started
    later inherit it.  The price: a large tensor's pages are new each call
    (TF's pool reuses them): one Predict of 100 MiB at a time took 20-30 %
    longer (480 -> 580 ms in ``bench/memory_return.py``).
    Requires: called before the models load.
    Thread safety: call it before starting threads (it writes the environment).
    """
    environ = os.environ if environ is None else environ
    for name, value in MALLOC_ENVIRONMENT.items():
        environ.setdefault(name, value)


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        trim = ctypes.CDLL(None).malloc_trim  # the symbols already loaded: libc's among them
    except (OSError, AttributeError):  # not glibc
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    function: Callable[[int], int] = trim
    return function
