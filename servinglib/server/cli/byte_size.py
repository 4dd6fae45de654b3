"""Byte sizes written as people write them: ``512MiB``, ``2GB``, ``1.5G``, ``1000000``."""

from __future__ import annotations

import re
from typing import Final

_UNITS: Final[dict[str, int]] = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "kib": 1 << 10,
    "m": 1000**2,
    "mb": 1000**2,
    "mib": 1 << 20,
    "g": 1000**3,
    "gb": 1000**3,
    "gib": 1 << 30,
    "t": 1000**4,
    "tb": 1000**4,
    "tib": 1 << 40,
}
_MAX_BYTES: Final = (1 << 63) - 1
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*")


def parse_byte_size(text: str) -> int:
    """The bytes ``text`` says: a number with an optional unit, decimal (kB, MB, GB, TB, and K,
    M, G, T) or binary (KiB, MiB, GiB, TiB), case-insensitive, up to 2**63 - 1.  ValueError
    for anything else.
    """
    match = _SIZE.fullmatch(text) if len(text) <= 64 else None
    unit = match.group(2).lower() if match is not None else None
    if match is None or unit not in _UNITS:
        raise ValueError(
            f"expected a size in bytes such as 1000000, 512MiB or 2GB, got {text[:64]!r}"
        )
    size = int(float(match.group(1)) * _UNITS[unit])
    if size > _MAX_BYTES:
        raise ValueError(f"a size of at most {_MAX_BYTES} bytes, got {text!r}")
    return size
