"""Serve two models in your own process: a ServerCore built from a ModelServerConfig."""

import numpy as np

from servinglib import (
    ModelConfig,
    ModelServerConfig,
    ModelSpec,
    PythonPlatformConfig,
    ServerCore,
    ServerCoreOptions,
    call_signature,
)
from servinglib.examples import HALF_PLUS_TWO, PYTHON_HALF_PLUS_TWO

config = ModelServerConfig(
    (
        ModelConfig.tensorflow("half_plus_two", HALF_PLUS_TWO),  # a SavedModel, versions 1 and 2
        ModelConfig.python("python_half_plus_two", PYTHON_HALF_PLUS_TWO),  # a model.py
    )
)
# Loading a Python model runs its model.py: allow that only for code you trust.
options = ServerCoreOptions(
    platform_configs={"python": PythonPlatformConfig(allow_code_execution=True)}
)

with ServerCore(config, options) as core:  # returns once every model serves
    x = np.array([1.0, 2.0, 5.0], np.float32)
    for name in core.list_models():
        with core.servable_handle(ModelSpec.latest(name)) as handle:
            y = call_signature(handle.servable, "serving_default", {"x": x})["y"]
            print(f"{name} version {handle.id.version}: y = {y}")
