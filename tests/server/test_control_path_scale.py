"""The control path's threads do not grow with the number of models, and events still work."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import attrs
from on_demand_models import OPTIONS, WAIT_S, hooks, write_models

from servinglib.server.config import ModelServerConfig
from servinglib.server.server_core import ServerCore
from servinglib.sources.storage_path_source_config import FileSystemStoragePathSourceConfig
from servinglib.testing import wait_until

# Polls too rare to matter: only file-system events can pick a new version up in time.
EVENTS_ONLY = attrs.evolve(
    OPTIONS, source=FileSystemStoragePathSourceConfig(file_system_poll_wait_seconds=3600)
)
SMALL_CONSTANT = 4


def threads_serving(root: Path, count: int) -> int:
    """How many threads the process has while a core serves ``count`` models on demand."""
    with ServerCore(ModelServerConfig(write_models(root, count, 10)), EVENTS_ONLY) as core:
        wait_until(core.ready, WAIT_S)
        return threading.active_count()


def test_two_hundred_models_have_the_threads_of_two_and_a_new_version_is_picked_up(
    tmp_path: Path,
) -> None:
    """A core watching 200 base paths runs no more threads than one watching 2 (plus a small
    constant), and a version published under one of the 200 is found by its events."""
    with hooks():
        two = threads_serving(tmp_path / "two", 2)
        models = write_models(tmp_path / "many", 200, 10)
        with ServerCore(ModelServerConfig(models), EVENTS_ONLY) as core:
            wait_until(core.ready, WAIT_S)
            assert threading.active_count() <= two + SMALL_CONSTANT
            base = Path(models[150].base_path)
            shutil.copytree(base / "1", base / ".2.partial")
            os.rename(base / ".2.partial", base / "2")

            def found_version_2() -> bool:
                registered = core.on_demand.registered("m150")
                return registered is not None and 2 in registered[0]

            wait_until(found_version_2, WAIT_S)
