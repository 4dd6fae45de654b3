"""VersionCheck: what a platform says a complete version directory holds."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeAlias

VersionCheck: TypeAlias = Callable[[str], "str | None"]
"""``check(version_dir)`` → why the directory is not a complete version yet, or None.

Called by a file-system source on each version directory it has not
offered yet, before it waits for the files to settle; must be quick (a few
stat() calls), must not raise, and may be called from any thread.
"""


def holds_a_file(path: str) -> str | None:
    """The default check: a version directory is complete once it holds any file."""
    for _root, _dirs, files in os.walk(path):
        if files:
            return None
    return "no files yet"
