"""reload_config replaces the whole desired state; load_model and unload_model change one model."""

from servinglib import (
    ModelConfig,
    ModelServerConfig,
    PythonPlatformConfig,
    ServerCore,
    ServerCoreOptions,
)
from servinglib.errors import InvalidArgumentError, NotFoundError
from servinglib.examples import PYTHON_HALF_PLUS_TWO

a = ModelConfig.python("a", PYTHON_HALF_PLUS_TWO)
b = ModelConfig.python("b", PYTHON_HALF_PLUS_TWO)
c = ModelConfig.python("c", PYTHON_HALF_PLUS_TWO)
options = ServerCoreOptions(
    platform_configs={"python": PythonPlatformConfig(allow_code_execution=True)}
)

with ServerCore(ModelServerConfig((a,)), options) as core:
    core.reload_config(ModelServerConfig((a, b)))  # returns once b serves
    print(f"reloaded: {core.list_models()}, ready() = {core.ready()}")

    try:  # one invalid model rejects the whole config: b is not removed either
        core.reload_config(ModelServerConfig((ModelConfig.tensorflow("a", PYTHON_HALF_PLUS_TWO),)))
    except InvalidArgumentError as error:
        print(f"rejected: {error}; still serving {core.list_models()}")

    core.reload_config(ModelServerConfig((b,)))  # a is unloaded (not waited for)
    print(f"reloaded: {core.list_models()}")

    core.load_model(c)  # the config plus c; waits for c, as reload_config does
    core.unload_model("b")  # the config minus b
    print(f"after load_model and unload_model: {core.config.names}")
    try:
        core.unload_model("b")
    except NotFoundError as error:
        print(f"unload_model again: {error}")
