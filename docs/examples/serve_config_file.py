"""Serve a models.config file and apply its edits while serving; a bad edit changes nothing."""

import os
import shutil
import tempfile
from pathlib import Path

from servinglib import PythonPlatformConfig, ServerCore, ServerCoreOptions
from servinglib.examples import PYTHON_HALF_PLUS_TWO
from servinglib.server import ModelConfigFileWatcher, read_model_server_config
from servinglib.testing import wait_until

ONE_MODEL = """
model_config_list {
  config { name: "a"  base_path: "models/a"  model_platform: "python" }
}
"""
TWO_MODELS = """
model_config_list {
  config { name: "a"  base_path: "models/a"  model_platform: "python" }
  config { name: "b"  base_path: "models/b"  model_platform: "python" }
}
"""


def write_config(path: Path, text: str) -> None:
    """Writes aside, then renames into place: readers see the old file or the new one."""
    aside = path.with_name(path.name + ".tmp")
    aside.write_text(text)
    os.replace(aside, path)


with tempfile.TemporaryDirectory() as root:
    for name in ["a", "b"]:
        shutil.copytree(PYTHON_HALF_PLUS_TWO, Path(root) / "models" / name)
    path = Path(root) / "models.config"
    write_config(path, ONE_MODEL)

    config = read_model_server_config(path)  # relative base paths: next to the file
    for model in config.models:
        print(f"{model.name}: base_path {model.base_path.replace(root, '<root>')}")
    options = ServerCoreOptions(
        platform_configs={"python": PythonPlatformConfig(allow_code_execution=True)}
    )
    with (
        ServerCore(config, options) as core,
        ModelConfigFileWatcher(core, str(path), poll_wait_seconds=60) as watcher,
    ):
        write_config(path, TWO_MODELS)  # picked up at once by a filesystem event
        wait_until(lambda: watcher.status().applied_at_s is not None)
        print(f"after adding b: {core.list_models()}, ready() = {core.ready()}")

        for bad in [TWO_MODELS[:60], TWO_MODELS.replace('"python"', '"tensorflow"', 1)]:
            write_config(path, bad)  # cut short (as if read mid-write), then invalid
            wait_until(lambda: watcher.status().error is not None)
            print(f"bad edit: {str(watcher.status().error).replace(root, '<root>')}")
            print(f"  still serving {core.list_models()}, ready() = {core.ready()}")
            write_config(path, TWO_MODELS)  # repaired: the error clears
            wait_until(lambda: watcher.status().error is None)
