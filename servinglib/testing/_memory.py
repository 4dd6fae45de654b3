"""The process's resident memory, for the memory checks of check_loader."""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterator

_STATM = "/proc/self/statm"


def resident_bytes() -> int | None:
    """Resident memory (RSS) after a full garbage collection; None where /proc is missing."""
    gc.collect()
    try:
        with open(_STATM, "rb") as statm:
            fields = statm.read().split()
    except OSError:
        return None
    return int(fields[1]) * os.sysconf("SC_PAGE_SIZE")


@contextlib.contextmanager
def collections_of_new_objects_only() -> Iterator[None]:
    """Within it, garbage collections look only at objects made since it was entered.

    Everything alive on entry is frozen (:func:`gc.freeze`), so a collection
    in a large heap stays quick, and moved back on exit; a heap someone else
    froze already is left as it is.
    Thread safety: the garbage collector is process-wide: one at a time.
    """
    if gc.get_freeze_count() > 0:
        yield
        return
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def format_bytes(count: int) -> str:
    """``count`` bytes for people: "512 B", "3.0 KiB", "64.0 MiB"."""
    size = float(count)
    for unit in ("B", "KiB", "MiB"):
        if abs(size) < 1024:
            return f"{count} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"
