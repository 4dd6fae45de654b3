"""ServerCore's management operations: a load that never finishes holds no lock others need."""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from servinglib import FileSystemStoragePathSourceConfig
from servinglib.core.servable_state import ManagerState
from servinglib.errors import NotFoundError, UnavailableError
from servinglib.server.config import ModelConfig, ModelServerConfig
from servinglib.server.model_spec import ModelSpec
from servinglib.server.server_core import ServerCore
from servinglib.sources.version_policy import ServableVersionPolicy
from servinglib.testing import wait_until, write_python_model
from servinglib.testing.plugin import TEST_SERVER_CORE_OPTIONS

# Loads only once the test writes GO beside it (or 120 s pass), noting that its load began.
MODEL_PY = """
import time
from pathlib import Path
from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec

class Model(PythonModel):
    def load(self, path):
        (Path(path) / "LOADING").write_text("")
        deadline = time.monotonic() + 120
        while not (Path(path) / "GO").exists() and time.monotonic() < deadline:
            time.sleep(0.01)

    @signature(name="serving_default", inputs=[TensorSpec("x", "float32", [-1])],
               outputs=[TensorSpec("y", "float32", [-1])])
    def predict(self, x):
        return {"y": x}
"""

OPTIONS = attrs.evolve(
    TEST_SERVER_CORE_OPTIONS,
    servable_state_waiter_timeout_s=None,  # as the CLI: a wait has no time limit
    manager=attrs.evolve(TEST_SERVER_CORE_OPTIONS.manager, num_load_threads=1),
    # New versions arrive through filesystem events.
    source=FileSystemStoragePathSourceConfig(file_system_poll_wait_seconds=60.0),
)


def model(root: Path, name: str, *, loads: bool = True) -> ModelConfig:
    base = write_python_model(root, name, MODEL_PY, files={"GO": ""} if loads else None)
    return ModelConfig(name, str(base), "python")


@pytest.fixture
def core(tmp_path: Path) -> Iterator[ServerCore]:
    config = ModelServerConfig([model(tmp_path, "keep"), model(tmp_path, "gone")])
    with ServerCore(config, OPTIONS) as core:
        yield core


@pytest.fixture
def threads() -> Iterator[concurrent.futures.ThreadPoolExecutor]:
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        yield pool


def test_a_directory_without_versions_fails_its_load_at_once(
    core: ServerCore, tmp_path: Path
) -> None:
    """A base path holding no version is NOT_FOUND at once; it stays configured and loads later."""
    empty = tmp_path / "empty"
    (empty / "conf.d").mkdir(parents=True)
    with pytest.raises(NotFoundError, match="No versions of model empty found"):
        core.load_model(ModelConfig("empty", str(empty), "python"))
    assert "empty" in core.list_models()
    assert isinstance(core.failed_models()["empty"], NotFoundError)
    model(tmp_path / "staging", "empty")
    (tmp_path / "staging" / "empty" / "1").rename(empty / "1")
    wait_until(lambda: "empty" not in core.failed_models(), timeout_s=30)
    assert core.model_status("empty").versions[0].state is ManagerState.AVAILABLE


def test_remove_on_failure_takes_a_failed_new_model_out(core: ServerCore, tmp_path: Path) -> None:
    """With remove_on_failure a new model that fails is unconfigured again: ready as before."""
    (tmp_path / "empty").mkdir()
    with pytest.raises(NotFoundError, match="No versions of model empty found"):
        core.load_model(
            ModelConfig("empty", str(tmp_path / "empty"), "python"), remove_on_failure=True
        )
    assert core.list_models() == ["gone", "keep"]
    assert core.failed_models() == {}
    assert core.ready()


def test_remove_on_failure_keeps_a_change_made_meanwhile(
    core: ServerCore, tmp_path: Path, threads: concurrent.futures.ThreadPoolExecutor
) -> None:
    """A failed load whose model another call replaced during the wait leaves the replacement."""
    hanging = model(tmp_path, "hanging", loads=False)
    pending = threads.submit(core.load_model, hanging, remove_on_failure=True)
    wait_until((tmp_path / "hanging" / "1" / "LOADING").exists, timeout_s=30)
    replacement = attrs.evolve(hanging, version_policy=ServableVersionPolicy.all())
    core.load_model(replacement)
    core.drain()  # the first load's wait ends: UNAVAILABLE
    with pytest.raises(UnavailableError):
        pending.result(timeout=10)
    assert core.config.model("hanging") == replacement
    (tmp_path / "hanging" / "1" / "GO").write_text("")  # so that close() can unload it


def test_a_hanging_load_lets_unloads_and_reloads_through(
    core: ServerCore, tmp_path: Path, threads: concurrent.futures.ThreadPoolExecutor
) -> None:
    """While one model's load hangs, another model unloads and a second reload applies."""
    hanging = model(tmp_path, "hanging", loads=False)
    pending = threads.submit(core.load_model, hanging)
    wait_until((tmp_path / "hanging" / "1" / "LOADING").exists, timeout_s=30)
    threads.submit(core.unload_model, "gone").result(timeout=10)
    assert core.list_models() == ["hanging", "keep"]
    assert not pending.done()
    (tmp_path / "hanging" / "1" / "GO").write_text("")
    pending.result(timeout=30)
    with core.servable_handle(ModelSpec.latest("hanging")) as handle:
        assert handle.id.version == 1


def test_drain_ends_the_wait_of_a_hanging_load(
    core: ServerCore, tmp_path: Path, threads: concurrent.futures.ThreadPoolExecutor
) -> None:
    """A reload waiting for a load that hangs returns UNAVAILABLE once the server drains."""
    pending = threads.submit(core.load_model, model(tmp_path, "hanging", loads=False))
    wait_until((tmp_path / "hanging" / "1" / "LOADING").exists, timeout_s=30)
    started = time.monotonic()
    core.drain()
    with pytest.raises(UnavailableError, match="server stopped before model hanging"):
        pending.result(timeout=10)
    assert time.monotonic() - started < 10
    (tmp_path / "hanging" / "1" / "GO").write_text("")  # so that close() can unload it


def test_a_moved_base_path_keeps_its_loaded_versions_and_says_so(
    core: ServerCore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A version is known by its number: moving a model's base_path to files with the same
    version numbers keeps the loaded ones serving (no gap), and one line says so and how to
    serve the new files; a base_path with a new version number serves it."""
    moved = tmp_path / "moved"
    model(moved, "keep")
    caplog.set_level("WARNING", logger="servinglib.server.server_core")
    core.reload_config(
        ModelServerConfig([ModelConfig("keep", str(moved / "keep"), "python"), model_of(core)])
    )
    (line,) = [r.getMessage() for r in caplog.records if "base_path" in r.getMessage()]
    assert f"from {tmp_path / 'keep'} to {moved / 'keep'}" in line
    assert "version 1 stays loaded from the old base path" in line
    assert "new version number" in line
    assert core.resolve_version(ModelSpec.latest("keep")) == 1


def model_of(core: ServerCore) -> ModelConfig:
    gone = core.config.model("gone")
    assert gone is not None
    return gone
