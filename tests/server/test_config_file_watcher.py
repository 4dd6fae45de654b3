"""The model config file watcher: edits apply while serving; bad edits change nothing."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from servinglib import FileSystemStoragePathSourceConfig
from servinglib.errors import StatusCode
from servinglib.loaders.python import PythonPlatformConfig
from servinglib.server.config import read_model_server_config
from servinglib.server.config_file_watcher import ModelConfigFileWatcher
from servinglib.server.server_core import ServerCore
from servinglib.server.server_core_options import ServerCoreOptions
from servinglib.testing import FakeClock, wait_until, write_python_model

MODEL_PY = """
from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec

class Model(PythonModel):
    @signature(
        name="serving_default",
        inputs=[TensorSpec("x", "float32", [-1])],
        outputs=[TensorSpec("y", "float32", [-1])],
    )
    def predict(self, x):
        return {"y": x}
"""


def config_text(*names: str) -> str:
    return (
        "model_config_list {\n"
        + "".join(
            f'  config {{ name: "{n}" base_path: "{n}" model_platform: "python" }}\n' for n in names
        )
        + "}\n"
    )


def write_atomically(path: Path, text: str) -> None:
    """Writes a file the way editors and config tools do: aside, then rename."""
    staging = path.with_suffix(".tmp")
    staging.write_text(text)
    os.replace(staging, path)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[ServerCore, Path]]:
    """A core serving model a from models.config (relative paths: next to the file)."""
    for name in ("a", "b"):
        write_python_model(tmp_path, name, MODEL_PY)
    config_file = tmp_path / "models.config"
    config_file.write_text(config_text("a"))
    options = ServerCoreOptions(
        platform_configs={"python": PythonPlatformConfig(allow_code_execution=True)},
        source=FileSystemStoragePathSourceConfig(file_system_poll_wait_seconds=60),
        servable_state_waiter_timeout_s=20,
    )
    with ServerCore(read_model_server_config(config_file), options) as core:
        yield core, config_file


def test_an_edit_is_applied_the_moment_it_is_written(served: tuple[ServerCore, Path]) -> None:
    """With a long poll period, a file write is still picked up at once (filesystem events)."""
    core, config_file = served
    with ModelConfigFileWatcher(core, str(config_file), poll_wait_seconds=3600):
        write_atomically(config_file, config_text("a", "b"))
        wait_until(lambda: core.list_models() == ["a", "b"])
        wait_until(lambda: bool(core.model_status("b").versions))
        assert core.model_status("b").versions[0].version == 1


def test_polling_alone_picks_up_edits(served: tuple[ServerCore, Path]) -> None:
    """Without events, the edit is applied when the poll period passes."""
    core, config_file = served
    clock = FakeClock()
    with ModelConfigFileWatcher(
        core, str(config_file), 30, watch_filesystem_events=False, clock=clock
    ) as watcher:
        write_atomically(config_file, config_text("b"))
        assert core.list_models() == ["a"]
        clock.advance(30)
        wait_until(lambda: core.list_models() == ["b"])
        wait_until(lambda: watcher.status().applied_at_s is not None)


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ('model_config_list { config { name: "b" base_path: "b" ', StatusCode.INVALID_ARGUMENT),
        ("model_config_list { config { nmae: 1 } }", StatusCode.INVALID_ARGUMENT),
        (
            'model_config_list { config { name: "a" base_path: "a" '
            'model_platform: "tensorflow" } }',
            StatusCode.INVALID_ARGUMENT,
        ),
    ],
    ids=["half-written", "syntax", "platform-change"],
)
def test_a_bad_edit_changes_nothing_and_is_reported(
    served: tuple[ServerCore, Path], text: str, code: StatusCode
) -> None:
    """A half-written, invalid or rejected file keeps the last good config serving."""
    core, config_file = served
    with ModelConfigFileWatcher(core, str(config_file), 3600) as watcher:
        config_file.write_text(text)
        wait_until(lambda: watcher.status().error is not None)
        error = watcher.status().error
        assert error is not None
        assert error.code is code
        assert core.list_models() == ["a"]
        assert core.ready()
        write_atomically(config_file, config_text("a", "b"))  # the fix is picked up
        wait_until(lambda: core.list_models() == ["a", "b"])
        wait_until(lambda: watcher.status().error is None)


def test_unchanged_content_is_not_reloaded(served: tuple[ServerCore, Path]) -> None:
    """Rewriting the same content does not reload; check_once says nothing was applied."""
    core, config_file = served
    with ModelConfigFileWatcher(core, str(config_file), 3600, watch_filesystem_events=False) as w:
        write_atomically(config_file, config_text("a"))
        assert w.check_once() is False
        write_atomically(config_file, config_text("a", "b"))
        assert w.check_once() is True
        assert core.list_models() == ["a", "b"]


def test_an_applied_config_names_the_models_not_available_yet(
    served: tuple[ServerCore, Path], caplog: pytest.LogCaptureFixture
) -> None:
    """A config applied with a model whose directory is missing says applied, naming it and why."""
    core, config_file = served
    with (
        caplog.at_level("INFO", logger="servinglib.server.config_file_watcher"),
        ModelConfigFileWatcher(core, str(config_file), 3600, watch_filesystem_events=False) as w,
    ):
        write_atomically(config_file, config_text("a", "late"))
        assert w.check_once() is True
        status = w.status()
        assert status.error is None
        assert list(status.unavailable) == ["late"]
        assert core.list_models() == ["a", "late"]
    records = [r for r in caplog.records if r.name == "servinglib.server.config_file_watcher"]
    assert [r.levelname for r in records] == ["WARNING"]
    message = records[0].getMessage()
    assert message.startswith(f"applied model config file {config_file}; not available yet: ")
    assert f"late (Could not find base path {config_file.parent / 'late'}" in message


def test_an_edit_in_place_logs_no_false_error(
    served: tuple[ServerCore, Path], caplog: pytest.LogCaptureFixture
) -> None:
    """Truncating the file, then writing it (an in-place edit), applies it with no error logged."""
    core, config_file = served
    with (
        caplog.at_level("DEBUG", logger="servinglib.server.config_file_watcher"),
        ModelConfigFileWatcher(core, str(config_file), 3600, settle_s=5.0) as watcher,
        open(config_file, "r+b") as file,
    ):
        file.truncate(0)
        file.flush()
        os.fsync(file.fileno())
        # The watcher saw the empty file (it says so at DEBUG, or, wrongly, as an error).
        wait_until(lambda: any("unfinished" in r.getMessage() for r in caplog.records))
        file.write(config_text("a", "b").encode())
        file.flush()
        wait_until(lambda: core.list_models() == ["a", "b"])
        assert watcher.status().error is None
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


def test_a_file_still_bad_after_settling_is_reported(served: tuple[ServerCore, Path]) -> None:
    """An unparsable file is reported only once it stayed the same for the settle window."""
    core, config_file = served
    clock = FakeClock()
    with ModelConfigFileWatcher(
        core, str(config_file), 3600, watch_filesystem_events=False, settle_s=2.0, clock=clock
    ) as watcher:
        config_file.write_text("")
        assert watcher.check_once() is False
        assert watcher.status().error is None
        clock.advance(1.0)
        assert watcher.check_once() is False
        assert watcher.status().error is None
        clock.advance(1.0)
        wait_until(lambda: watcher.status().error is not None)
        error = watcher.status().error
        assert error is not None
        assert "sets no model_config_list" in error.message
        assert core.list_models() == ["a"]


def test_a_deleted_file_is_logged_once_and_its_return_is_applied(
    served: tuple[ServerCore, Path], caplog: pytest.LogCaptureFixture
) -> None:
    """A missing config file is one error line however often it is checked; its return applies."""
    core, config_file = served
    with ModelConfigFileWatcher(
        core, str(config_file), 3600, watch_filesystem_events=False, settle_s=0
    ) as watcher:
        text = config_file.read_text()
        config_file.unlink()
        with caplog.at_level(logging.INFO, logger="servinglib.server.config_file_watcher"):
            for _ in range(3):
                assert watcher.check_once() is False
            write_atomically(config_file, text)
            assert watcher.check_once() is True
        messages = [r.getMessage() for r in caplog.records]
        assert sum("not applied" in m for m in messages) == 1
        assert watcher.status().error is None
        assert core.list_models() == ["a"]
