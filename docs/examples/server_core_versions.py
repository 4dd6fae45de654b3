"""Versions and labels: ModelSpec picks the latest, a number or a label; labels move by reload."""

import shutil
import tempfile
from pathlib import Path

import numpy as np

from servinglib import (
    ManagerState,
    ModelConfig,
    ModelServerConfig,
    ModelSpec,
    PythonPlatformConfig,
    ServableRequest,
    ServableVersionPolicy,
    ServerCore,
    ServerCoreOptions,
    call_signature,
)
from servinglib.errors import FailedPreconditionError, ServingError

DOUBLER = Path(__file__).parent / "models" / "python_doubler" / "1"  # y = 2x + offset.txt


def predict(core: ServerCore, spec: ModelSpec) -> str:
    try:
        with core.servable_handle(spec) as handle:
            y = call_signature(handle.servable, None, {"x": np.array([1.0], np.float32)})["y"]
            return f"version {handle.id.version}, y = {y}"
    except ServingError as error:
        return f"{type(error).__name__}: {error}"


with tempfile.TemporaryDirectory() as tmp:
    for version, offset in [(1, "0.5"), (2, "100")]:  # two versions: y(1) = 2.5 and 102
        shutil.copytree(DOUBLER, Path(tmp) / "doubler" / str(version))
        (Path(tmp) / "doubler" / str(version) / "offset.txt").write_text(offset)

    def doubler(labels: dict[str, int]) -> ModelServerConfig:
        """Serve versions 1 and 2 of the doubler, with these labels."""
        policy = ServableVersionPolicy.specific([1, 2])
        return ModelServerConfig(
            (ModelConfig("doubler", Path(tmp) / "doubler", "python", policy, labels),)
        )

    options = ServerCoreOptions(
        platform_configs={"python": PythonPlatformConfig(allow_code_execution=True)}
    )
    with ServerCore(doubler({}), options) as core:
        # ServerCore returns once the model serves; wait for both versions to.
        core.monitor.wait_until_servables_reach_state(
            [ServableRequest.specific("doubler", v) for v in (1, 2)], ManagerState.AVAILABLE
        )
        for spec in [ModelSpec.latest("doubler"), ModelSpec.specific("doubler", 1)]:
            print(f"{spec}: {predict(core, spec)}")

        # Labels may point only at versions that are available: add them once both serve.
        core.reload_config(doubler({"stable": 1, "canary": 2}))
        for label in ["stable", "canary", "beta"]:
            spec = ModelSpec.labeled("doubler", label)
            print(f"{spec}: {predict(core, spec)}")
        print(f"doubler version 3: {predict(core, ModelSpec.specific('doubler', 3))}")

        try:  # rejected whole: the labels above keep serving
            core.reload_config(doubler({"stable": 1, "canary": 3}))
        except FailedPreconditionError as error:
            print(f"reload rejected: {error}")

        core.reload_config(doubler({"stable": 2}))  # promote version 2; "canary" is gone
        print(f"after promotion, stable: {predict(core, ModelSpec.labeled('doubler', 'stable'))}")
