"""A Triton Python-backend model run in this process, for its unit tests."""

from __future__ import annotations

import os

from servinglib.loaders.python import PythonLoader, PythonPlatformConfig
from servinglib.testing._servable_harness import ServableHarness


def triton_python_model(
    model_dir: str | os.PathLike[str], version: int = 1, *, name: str | None = None
) -> ServableHarness:
    """A harness serving version ``version`` of the Triton Python model in ``model_dir``
    (``<repository>/<model>``, holding ``config.pbtxt`` or not, and ``<version>/model.py``),
    as the "python" platform serves it.

    Use it in a ``with`` block: entering loads the model (``auto_complete_config``,
    ``initialize``) and raises AssertionError if it fails; ``call(None, inputs)`` sends one
    request to ``execute`` and gives its outputs or raises its error (a ServingError with
    the TritonError's code); ``call_stream(None, inputs)`` reads a decoupled model's
    responses; leaving unloads it (``finalize``).  The model runs in this process.
    """
    directory = os.fspath(model_dir)
    config = PythonPlatformConfig(allow_code_execution=True)
    return ServableHarness(
        lambda: PythonLoader(os.path.join(directory, str(version)), config),
        name=name or os.path.basename(os.path.normpath(directory)),
        version=version,
    )
