"""Readiness, status, metadata, handles, and close()."""

from servinglib import (
    ModelConfig,
    ModelServerConfig,
    ModelSpec,
    PythonPlatformConfig,
    ServerCore,
    ServerCoreOptions,
)
from servinglib.errors import FailedPreconditionError
from servinglib.examples import PYTHON_HALF_PLUS_TWO

config = ModelServerConfig((ModelConfig.python("m", PYTHON_HALF_PLUS_TWO),))
options = ServerCoreOptions(
    platform_configs={"python": PythonPlatformConfig(allow_code_execution=True)},
)

core = ServerCore(config, options)
print(f"ready() = {core.ready()}, failed_models() = {core.failed_models()}")
for version in core.model_status("m").versions:  # newest first
    print(f"m version {version.version}: {version.state.name}, error {version.error}")
metadata = core.model_metadata(ModelSpec.latest("m"))
for name, signature in metadata.signatures.items():
    inputs = {t.name: (str(t.dtype), t.shape) for t in signature.inputs.values()}
    print(f"m version {metadata.version} ({metadata.platform}) signature {name}: inputs {inputs}")

spec = ModelSpec.latest("m")
with core.servable_handle(spec) as handle:  # the version cannot unload while it is held
    print(f"a handle: version {handle.id.version}")

core.close()  # unloads everything (waiting for handles still held); idempotent
core.close()
print(f"closed: ready() = {core.ready()}")
try:
    core.reload_config(config)
except FailedPreconditionError as error:
    print(f"reload_config after close: {error}")
