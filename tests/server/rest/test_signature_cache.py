"""TF Serving predict follows the latest version at once, although signatures are cached."""

from __future__ import annotations

from pathlib import Path

import attrs

from servinglib import FileSystemStoragePathSourceConfig
from servinglib.server.config import ModelConfig, ModelServerConfig
from servinglib.server.rest import create_app
from servinglib.server.server_core import ServerCore
from servinglib.testing import wait_until, write_python_model
from tests.server.rest.conftest import CORE_OPTIONS, Client

MODEL_PY = """
import numpy as np
from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec

class Model(PythonModel):
    def load(self, path):
        pass

    @signature(name="serving_default", inputs=[TensorSpec("x", {dtype!r}, [-1])],
               outputs=[TensorSpec("y", {dtype!r}, [-1])])
    def add(self, x):
        return {{"y": x + {version}}}
"""


def publish(base: Path, version: int, dtype: str) -> None:
    write_python_model(
        base.parent, base.name, MODEL_PY.format(dtype=dtype, version=version), version=version
    )


def test_new_version_and_new_signature_are_picked_up(tmp_path: Path) -> None:
    """A new version (with a new input dtype) serves the next predict, decoded by its signature."""
    base = tmp_path / "m"
    base.mkdir()
    publish(base, 1, "float32")
    options = attrs.evolve(
        CORE_OPTIONS, source=FileSystemStoragePathSourceConfig(file_system_poll_wait_seconds=60.0)
    )
    with ServerCore(ModelServerConfig([ModelConfig.python("m", base)]), options) as core:
        app = create_app(core)
        client = Client(app)
        assert client.post("/v1/models/m:predict", json={"inputs": [1.5]}).json() == {
            "outputs": [2.5]
        }
        publish(base, 2, "int64")
        wait_until(
            lambda: (
                [v.version for v in core.model_status("m").versions if v.state.value == "AVAILABLE"]
                == [2]
            ),
            30.0,
        )
        assert client.post("/v1/models/m:predict", json={"inputs": [1]}).json() == {"outputs": [3]}
        refused = client.post("/v1/models/m:predict", json={"inputs": [1.5]})
        assert refused.status_code == 400
        app.close()
