"""``python -m servinglib``: loads the bundled example models in a ServerCore and calls them.

There is no network front end yet (REST and gRPC arrive with their issues, and with them the
``servinglib-server`` command): this loads ``half_plus_two`` (TensorFlow SavedModel, versions
1 and 2) and ``python_half_plus_two`` (a Python servable), prints each model's status and one
prediction, and exits.
"""

import sys
from importlib.metadata import version

import numpy as np

from servinglib.examples import HALF_PLUS_TWO, PYTHON_HALF_PLUS_TWO
from servinglib.loaders.python import PythonPlatformConfig
from servinglib.servable import call_signature
from servinglib.server import ModelConfig, ModelServerConfig, ModelSpec, ServerCore
from servinglib.server.server_core import ServerCoreOptions


def main() -> int:
    """Serve the bundled examples in-process, print what they answer; return the exit status."""
    config = ModelServerConfig(
        (
            ModelConfig("half_plus_two", HALF_PLUS_TWO, "tensorflow"),
            ModelConfig("python_half_plus_two", PYTHON_HALF_PLUS_TWO, "python"),
        )
    )
    # The bundled Python model ships with servinglib, so running its code is safe to allow.
    options = ServerCoreOptions(
        platform_configs={"python": PythonPlatformConfig(allow_code_execution=True)},
        file_system_poll_wait_seconds=0,
    )
    print(f"servinglib {version('servinglib')}: loading the bundled example models...")
    x = np.array([1.0, 2.0, 5.0], np.float32)
    with ServerCore(config, options) as core:
        for name in core.list_models():
            status = core.model_status(name)
            states = ", ".join(f"version {v.version}: {v.state}" for v in status.versions)
            with core.servable_handle(ModelSpec.latest(name)) as handle:
                y = call_signature(handle.servable, None, {"x": x})["y"]
            print(f"  {name} ({states}): x={x.tolist()} -> y={y.tolist()}")
        print(f"ready: {core.ready()}")
    print(
        "No network front end yet: REST, gRPC and the servinglib-server command come with "
        "their issues (see README.md)."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
