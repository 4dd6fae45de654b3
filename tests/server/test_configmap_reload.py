"""A models.config mounted from a ConfigMap reloads when the kubelet swaps its ``..data`` link."""

from __future__ import annotations

import os
from pathlib import Path

from servinglib.loaders.python import PythonPlatformConfig
from servinglib.server.config import read_model_server_config
from servinglib.server.config_file_watcher import ModelConfigFileWatcher
from servinglib.server.server_core import ServerCore, ServerCoreOptions
from servinglib.sources import FileSystemStoragePathSourceConfig
from servinglib.testing import wait_until, write_python_model
from tests.server.configmap_volume import DATA_DIR, write_configmap
from tests.server.test_config_file_watcher import MODEL_PY

OPTIONS = ServerCoreOptions(
    platform_configs={"python": PythonPlatformConfig(allow_code_execution=True)},
    source=FileSystemStoragePathSourceConfig(file_system_poll_wait_seconds=60),
    servable_state_waiter_timeout_s=20,
)


def _config(models: Path, *names: str) -> str:
    entries = "".join(
        f'  config {{ name: "{n}" base_path: "{models / n}" model_platform: "python" }}\n'
        for n in names
    )
    return f"model_config_list {{\n{entries}}}\n"


def _models(root: Path) -> Path:
    for name in ("a", "b"):
        write_python_model(root, name, MODEL_PY)
    return root


def test_the_volume_helper_lays_out_what_the_kubelet_does(tmp_path: Path) -> None:
    """The file is a symlink through ..data to a timestamped directory, swapped whole."""
    write_configmap(tmp_path, {"models.config": "one"})
    first = os.readlink(tmp_path / DATA_DIR)
    assert first.startswith("..")
    assert first != DATA_DIR
    assert os.readlink(tmp_path / "models.config") == os.path.join(DATA_DIR, "models.config")
    write_configmap(tmp_path, {"models.config": "two"})
    second = os.readlink(tmp_path / DATA_DIR)
    assert second != first
    assert not (tmp_path / first).exists()
    assert (tmp_path / "models.config").read_text() == "two"
    assert sorted(os.listdir(tmp_path)) == sorted([DATA_DIR, second, "models.config"])


def test_a_configmap_update_is_applied_at_once(tmp_path: Path) -> None:
    """With an hour's poll period, the ..data swap alone (filesystem events) reloads the config."""
    models = _models(tmp_path / "models")
    volume = tmp_path / "config"
    volume.mkdir()
    write_configmap(volume, {"models.config": _config(models, "a")})
    config_file = volume / "models.config"
    with (
        ServerCore(read_model_server_config(config_file), OPTIONS) as core,
        ModelConfigFileWatcher(core, str(config_file), poll_wait_seconds=3600) as watcher,
    ):
        write_configmap(volume, {"models.config": _config(models, "a", "b")})
        wait_until(lambda: core.list_models() == ["a", "b"], 20.0)
        wait_until(core.ready, 20.0)
        write_configmap(volume, {"models.config": _config(models, "b")})
        wait_until(lambda: core.list_models() == ["b"], 20.0)
        assert watcher.status().error is None


def test_polling_alone_sees_a_configmap_update(tmp_path: Path) -> None:
    """Without filesystem events, the next poll reads through the swapped link."""
    models = _models(tmp_path / "models")
    volume = tmp_path / "config"
    volume.mkdir()
    write_configmap(volume, {"models.config": _config(models, "a")})
    config_file = volume / "models.config"
    with (
        ServerCore(read_model_server_config(config_file), OPTIONS) as core,
        ModelConfigFileWatcher(
            core, str(config_file), poll_wait_seconds=0.05, watch_filesystem_events=False
        ),
    ):
        write_configmap(volume, {"models.config": _config(models, "b")})
        wait_until(lambda: core.list_models() == ["b"], 20.0)
