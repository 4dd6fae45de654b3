"""Object keys as file paths: which keys of a version may become files of its local copy."""

from __future__ import annotations

import os
from collections.abc import Iterable

SHOWN_KEY_CHARS = 200
"""How much of a refused key an error message quotes."""


def is_directory_marker(key: str, size: int) -> bool:
    """Whether ``key`` is an empty object ending in ``/``: a folder marker, not a file."""
    return key.endswith("/") and size == 0


def unsafe_key_reason(key: str) -> str | None:
    """Why ``key`` (relative to its version) cannot be a file of the copy, or None if it can."""
    if "\0" in key:
        return "holds a NUL byte"
    if "\\" in key:
        return "holds a backslash"
    for part in key.split("/"):
        if part in ("", ".", ".."):
            return f"has a part {part!r}" if part else "has an empty part (a '/' too many)"
    return None


def local_targets(directory: str, keys: Iterable[str]) -> dict[str, str]:
    """Key → the file it becomes under the new, empty ``directory``; ValueError if one would
    land outside it.

    Requires: ``unsafe_key_reason(key)`` is None for each key (this is the
    last check, on the real directory: each file's parent directory is
    resolved, symbolic links followed, once per distinct parent; the file
    names are plain and the directory new, so they are no links).
    """
    inside = os.path.join(os.path.realpath(directory), "")
    parents: dict[str, bool] = {}  # parent directory → whether it resolves inside
    targets = {}
    for key in keys:
        *dirs, name = key.split("/")
        parent = os.path.join(directory, *dirs)
        ok = parents.get(parent)
        if ok is None:
            ok = parents[parent] = os.path.join(os.path.realpath(parent), "").startswith(inside)
        if not ok:
            raise ValueError(f"key {shown_key(key)} resolves outside {directory}")
        targets[key] = os.path.join(parent, name)
    return targets


def shown_key(key: str) -> str:
    """``key`` quoted for a log line or an error: repr (no raw CR/LF), at most 200 characters."""
    if len(key) <= SHOWN_KEY_CHARS:
        return repr(key)
    return f"{key[:SHOWN_KEY_CHARS]!r}... ({len(key)} characters)"
