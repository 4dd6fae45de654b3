"""ModelManagement in process: the switch, roots, relative and URI base paths, python paths."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from servinglib.errors import InvalidArgumentError, PermissionDeniedError
from servinglib.server import (
    ModelConfig,
    ModelManagement,
    ModelManagementOptions,
    ModelServerConfig,
    ServerCore,
)
from servinglib.testing import write_python_model
from servinglib.testing.plugin import TEST_SERVER_CORE_OPTIONS

MODEL_PY = """
from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec

class Model(PythonModel):
    def load(self, path):
        pass

    @signature(inputs=[TensorSpec("x", "float32", [-1])],
               outputs=[TensorSpec("y", "float32", [-1])])
    def same(self, x):
        return {"y": x}
"""


def python_model(root: Path, name: str) -> ModelConfig:
    """Version 1 of a python model ``name`` under ``root``."""
    return ModelConfig.python(name, write_python_model(root, name, MODEL_PY))


@pytest.fixture
def core(tmp_path: Path) -> Iterator[ServerCore]:
    """A core serving python model ``a`` from ``models/a``, relative paths under ``models``."""
    options = attrs.evolve(
        TEST_SERVER_CORE_OPTIONS, model_config_list_root_dir=str(tmp_path / "models")
    )
    config = ModelServerConfig([python_model(tmp_path / "models", "a")])
    with ServerCore(config, options) as core:
        yield core


def test_off_by_default_naming_the_flag(core: ServerCore) -> None:
    """Every operation is PERMISSION_DENIED naming the flag; nothing changes."""
    management = ModelManagement(core)
    with pytest.raises(PermissionDeniedError, match="--allow_remote_model_management"):
        management.unload_model("a")
    with pytest.raises(PermissionDeniedError, match="--allow_remote_model_management"):
        management.reload_config(ModelServerConfig())
    assert core.list_models() == ["a"]


def test_default_roots_are_the_models_directories(core: ServerCore, tmp_path: Path) -> None:
    """Without allowed_roots, the roots are the directories holding the configured models."""
    management = ModelManagement(core, ModelManagementOptions(enabled=True))
    assert management.allowed_roots == (str((tmp_path / "models").resolve()),)
    roots = ModelManagementOptions(enabled=True, allowed_roots=" /a, /b/../c ,").allowed_roots
    assert roots == ("/a", "/b/../c")
    assert ModelManagement(core, ModelManagementOptions(allowed_roots=roots)).allowed_roots == (
        "/a",
        "/c",
    )


def test_relative_paths_resolve_against_the_root_dir(core: ServerCore, tmp_path: Path) -> None:
    """A relative base path is checked where ServerCore would load it from."""
    python_model(tmp_path / "models", "b")
    options = ModelManagementOptions(enabled=True, allow_python_models=True)
    ModelManagement(core, options).load_model(ModelConfig("b", "b", "python"))
    assert core.config.model("b") == ModelConfig.python("b", tmp_path / "models" / "b")
    with pytest.raises(PermissionDeniedError, match=r"'\.\./outside'"):
        ModelManagement(core, options).load_model(ModelConfig("c", "../outside", "python"))


def test_relative_paths_without_a_root_dir_are_invalid(tmp_path: Path) -> None:
    """Without model_config_list_root_dir a relative base path is INVALID_ARGUMENT."""
    config = ModelServerConfig([python_model(tmp_path, "a")])
    with ServerCore(config, TEST_SERVER_CORE_OPTIONS) as core:
        management = ModelManagement(core, ModelManagementOptions(enabled=True))
        with pytest.raises(InvalidArgumentError, match="relative base_path"):
            management.load_model(ModelConfig("b", "b", "tensorflow"))


def test_uris_are_outside_local_roots(core: ServerCore) -> None:
    """A storage URI is not under any local root, so it is refused as outside."""
    management = ModelManagement(core, ModelManagementOptions(enabled=True))
    with pytest.raises(PermissionDeniedError, match="outside the directories"):
        management.load_model(ModelConfig("u", "gs://bucket/models/u", "tensorflow"))


def test_configured_python_paths_stay_loadable(core: ServerCore, tmp_path: Path) -> None:
    """Without the python allowance, the config's own python path may be renamed, not a new one."""
    management = ModelManagement(core, ModelManagementOptions(enabled=True))
    management.load_model(ModelConfig.python("alias", tmp_path / "models" / "a"))
    assert core.list_models() == ["a", "alias"]
    python_model(tmp_path / "models", "b")
    with pytest.raises(PermissionDeniedError, match="--allow_remote_python_models"):
        management.load_model(ModelConfig.python("b", tmp_path / "models" / "b"))


def test_a_reload_to_failing_models_leaves_the_core_not_ready(
    core: ServerCore, tmp_path: Path
) -> None:
    """A reload replacing every model with one that fails leaves nothing served: not ready."""
    broken = write_python_model(tmp_path / "models", "broken", "def (:\n")
    options = ModelManagementOptions(enabled=True, allow_python_models=True)
    management = ModelManagement(core, options)
    assert core.ready()
    with pytest.raises(InvalidArgumentError, match="broken"):
        management.reload_config(ModelServerConfig([ModelConfig.python("broken", broken)]))
    assert core.failed_models().keys() == {"broken"}
    assert not core.ready()
