"""The process's resident memory, for the memory checks of check_loader."""

from __future__ import annotations

import gc
import os

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


def format_bytes(count: int) -> str:
    """``count`` bytes for people: "512 B", "3.0 KiB", "64.0 MiB"."""
    size = float(count)
    for unit in ("B", "KiB", "MiB"):
        if abs(size) < 1024:
            return f"{count} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"
