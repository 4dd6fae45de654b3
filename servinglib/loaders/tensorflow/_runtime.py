"""The one place TensorFlow is imported, and its process-wide settings."""

from __future__ import annotations

import functools
import logging
import os
import threading
from typing import Any

from servinglib._install import install_hint
from servinglib.errors import FailedPreconditionError
from servinglib.loaders.tensorflow._native_log import routed_native_log

_log = logging.getLogger(__name__)

# TF's C++ logging: 2 hides INFO and WARNING lines, such as the one TF logs for every request
# that fails an op (a client's bad input must not write to the server's stderr), and keeps
# errors.  Only a default: a value the user set wins.  TF_ENABLE_ONEDNN_OPTS is deliberately left
# alone: turning oneDNN off silences TF's import banner but slows large batches by 35-50%.
_ENV_DEFAULTS = {"TF_CPP_MIN_LOG_LEVEL": "2"}

_threads_lock = threading.Lock()


@functools.cache
def tensorflow() -> Any:  # noqa: ANN401 - TensorFlow ships no types
    """The ``tensorflow`` module, imported on first use (2-4 s, ~500 MB RSS).

    Raises FailedPreconditionError with the install hint when it is missing.
    Thread-safe (the import lock serializes concurrent first calls).
    """
    for name, value in _ENV_DEFAULTS.items():
        os.environ.setdefault(name, value)
    try:
        with routed_native_log():
            import tensorflow as tf
    except ImportError as exc:
        raise FailedPreconditionError(
            f"Loading SavedModels needs TensorFlow, which cannot be imported ({exc}): "
            + install_hint("tensorflow")
        ) from exc
    return tf


def configure_threads(intra_op: int, inter_op: int) -> None:
    """Applies TF's thread-pool sizes (0 = TF's default) before TF first runs an op.

    The pools are process-wide and fixed once TF has initialized its
    runtime; asking for other sizes afterwards logs a warning and keeps the
    sizes in force.  Thread-safe.
    """
    threading_config = tensorflow().config.threading
    with _threads_lock:
        for kind, wanted, get, set_ in (
            (
                "intra_op",
                intra_op,
                threading_config.get_intra_op_parallelism_threads,
                threading_config.set_intra_op_parallelism_threads,
            ),
            (
                "inter_op",
                inter_op,
                threading_config.get_inter_op_parallelism_threads,
                threading_config.set_inter_op_parallelism_threads,
            ),
        ):
            current = get()
            if wanted in (0, current):
                continue
            try:
                set_(wanted)
            except RuntimeError:  # TF's runtime is already initialized
                _log.warning(
                    "TensorFlow's %s_parallelism_threads is fixed once TF has run: it stays %d "
                    "(0: TF's default), not %d as configured",
                    kind,
                    current,
                    wanted,
                )
