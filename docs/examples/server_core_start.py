"""Starting with broken models: fail fast (the default), or start degraded."""

import tempfile
from pathlib import Path

import attrs

from servinglib import (
    ModelConfig,
    ModelServerConfig,
    PythonPlatformConfig,
    ServerCore,
    ServerCoreOptions,
)
from servinglib.errors import UnknownError
from servinglib.examples import PYTHON_HALF_PLUS_TWO

with tempfile.TemporaryDirectory() as tmp:
    (Path(tmp) / "broken" / "1").mkdir(parents=True)
    (Path(tmp) / "broken" / "1" / "model.py").write_text("def (:\n")  # cannot heal: no retries
    config = ModelServerConfig(
        (
            ModelConfig.python("good", PYTHON_HALF_PLUS_TWO),
            ModelConfig.python("broken", Path(tmp) / "broken"),
            ModelConfig.python("missing", Path(tmp) / "missing"),  # no such directory
        )
    )
    options = ServerCoreOptions(
        platform_configs={"python": PythonPlatformConfig(allow_code_execution=True)},
        servable_state_waiter_timeout_s=60.0,  # a bound for models whose loads keep retrying
    )

    def short(text: object) -> str:
        return str(text).replace(tmp, "<tmp>")

    try:
        ServerCore(config, options)  # fails: and closes everything it had started
    except UnknownError as error:
        print(f"fail fast: {type(error).__name__}: {short(error)}")

    with ServerCore(config, attrs.evolve(options, start_degraded=True)) as core:
        print(f"start_degraded: ready() = {core.ready()}, failed: {sorted(core.failed_models())}")
        for version in core.model_status("broken").versions:
            print(f"broken version {version.version}: {version.state.name}, {short(version.error)}")
        print(f"missing: {short(core.model_status('missing').error)}")
