"""``import triton_python_backend_utils`` while a ``model.py`` is imported, without Triton.

A Triton Python-backend model imports ``triton_python_backend_utils`` at its top.  Inside
:func:`backend_utils_importable` that name is servinglib's
:mod:`~servinglib.loaders.triton.pb_utils`, unless a module of that name is importable
already (Triton's own, say): then that one is left in place, never shadowed.
"""

from __future__ import annotations

import contextlib
import importlib.util
import sys
import threading
from collections.abc import Iterator

from servinglib.loaders.triton import pb_utils

MODULE_NAME = "triton_python_backend_utils"

_lock = threading.Lock()
_users = 0  # guarded by: _lock; blocks in which our module is installed under MODULE_NAME


@contextlib.contextmanager
def backend_utils_importable() -> Iterator[None]:
    """Makes ``import triton_python_backend_utils`` work inside the block.

    Thread safety: blocks may run on several threads at once (parallel loads); the name is
    removed when the last of them ends.  Code importing the name outside any block gets
    what Python finds, if anything.
    """
    global _users  # noqa: PLW0603 - the one count of blocks that share the alias
    with _lock:
        installed = _install_locked()
    try:
        yield
    finally:
        if installed:
            with _lock:
                _users -= 1
                if _users == 0 and sys.modules.get(MODULE_NAME) is pb_utils:
                    del sys.modules[MODULE_NAME]


def _install_locked() -> bool:
    global _users  # noqa: PLW0603 - see backend_utils_importable
    present = sys.modules.get(MODULE_NAME)
    if present is None:
        if importlib.util.find_spec(MODULE_NAME) is not None:
            return False  # a real one is importable: leave it
        sys.modules[MODULE_NAME] = pb_utils
    elif present is not pb_utils:
        return False
    _users += 1
    return True
