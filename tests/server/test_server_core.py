"""ServerCore end to end: real model directories, config reloads, labels, failures."""

from __future__ import annotations

import logging
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from servinglib import FileSystemStoragePathSourceConfig, LoadRetryOptions, ManagerOptions
from servinglib.core.servable_request import ServableRequest
from servinglib.core.servable_state import ManagerState
from servinglib.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    StatusCode,
    UnknownError,
)
from servinglib.loaders.python import PythonPlatformConfig
from servinglib.servable import call_signature
from servinglib.server.config import ModelConfig, ModelServerConfig
from servinglib.server.model_spec import ModelSpec
from servinglib.server.server_core import ServerCore
from servinglib.server.server_core_options import ServerCoreOptions
from servinglib.sources.version_policy import ServableVersionPolicy
from servinglib.testing import wait_until, write_python_model

MODEL_PY = """
import numpy as np
from pathlib import Path
from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec

class Model(PythonModel):
    def load(self, path):
        self.version = int(Path(path).name)
        if (Path(path) / "BROKEN").exists():
            raise ValueError("this version is broken")

    @signature(
        name="serving_default",
        inputs=[TensorSpec("x", "float32", [-1])],
        outputs=[TensorSpec("y", "float32", [-1])],
    )
    def predict(self, x):
        return {"y": x + self.version}
"""


def add_version(base: Path, version: int, *, broken: bool = False) -> Path:
    """Publishes a Python model version under ``base`` the safe way (write aside, rename)."""
    files = {"BROKEN": ""} if broken else None
    return write_python_model(base.parent, base.name, MODEL_PY, version=version, files=files)


def python_model(base: Path, name: str, **kwargs: object) -> ModelConfig:
    return ModelConfig(name, str(base / name), model_platform="python", **kwargs)  # type: ignore[arg-type]


def options(**overrides: object) -> ServerCoreOptions:
    defaults: dict[str, object] = {
        "platform_configs": {"python": PythonPlatformConfig(allow_code_execution=True)},
        # Pick-up comes from filesystem events.
        "source": FileSystemStoragePathSourceConfig(file_system_poll_wait_seconds=60.0),
        "manager": ManagerOptions(load_retry=LoadRetryOptions(max_num_load_retries=0)),
        "num_initial_load_threads": 2,
        "servable_state_waiter_timeout_s": 20.0,
    }
    defaults.update(overrides)
    return ServerCoreOptions(**defaults)  # type: ignore[arg-type]


def predict(core: ServerCore, spec: ModelSpec, x: float = 0.0) -> float:
    with core.servable_handle(spec) as handle:
        y = call_signature(handle.servable, None, {"x": np.array([x], np.float32)})["y"]
    return float(y[0])


@pytest.fixture
def models(tmp_path: Path) -> Path:
    """Two Python models: a (version 1) and b (version 1)."""
    add_version(tmp_path / "a", 1)
    add_version(tmp_path / "b", 1)
    return tmp_path


@pytest.fixture
def core(models: Path) -> Iterator[ServerCore]:
    config = ModelServerConfig((python_model(models, "a"), python_model(models, "b")))
    with ServerCore(config, options()) as core:
        yield core


def test_start_serves_every_configured_model(core: ServerCore) -> None:
    """Constructed with a config, the core returns once every model serves, and is ready."""
    assert core.ready()
    assert core.list_models() == ["a", "b"]
    assert predict(core, ModelSpec.latest("a"), 1.0) == 2.0
    status = core.model_status("a")
    assert [(v.version, v.state) for v in status.versions] == [(1, ManagerState.AVAILABLE)]


def test_new_version_swaps_in(core: ServerCore, models: Path) -> None:
    """A version renamed into the base path is loaded and the old one unloaded."""
    add_version(models / "a", 2)
    wait_until(lambda: predict(core, ModelSpec.latest("a")) == 2.0)
    wait_until(lambda: core.model_status("a").versions[-1].state is ManagerState.END)
    assert predict(core, ModelSpec.specific("a", 2)) == 2.0


def test_metadata_lists_the_signatures(core: ServerCore) -> None:
    """model_metadata gives the serving version, platform and signature specs."""
    metadata = core.model_metadata(ModelSpec.latest("a"))
    assert (metadata.name, metadata.version, metadata.platform) == ("a", 1, "python")
    assert list(metadata.signatures) == ["serving_default"]


def test_reload_adds_removes_and_changes_models(core: ServerCore, models: Path) -> None:
    """A reload is the complete desired state: c is added and waited for, b is unloaded."""
    add_version(models / "c", 1)
    add_version(models / "a", 2)
    a_pinned = python_model(models, "a", version_policy=ServableVersionPolicy.specific([1]))
    core.reload_config(ModelServerConfig((a_pinned, python_model(models, "c"))))
    assert predict(core, ModelSpec.latest("c")) == 1.0  # available when reload returns
    wait_until(lambda: core.model_status("b").versions[0].state is ManagerState.END)
    assert predict(core, ModelSpec.latest("a")) == 1.0  # pinned to version 1
    assert core.list_models() == ["a", "c"]
    assert core.ready()


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        ("platform", InvalidArgumentError, "Illegal to change a model's platform"),
        ("unknown-platform", InvalidArgumentError, "unsupported platform 'onnx'"),
        ("relative-path", InvalidArgumentError, "relative base_path"),
        ("label-unavailable", FailedPreconditionError, "not currently available"),
    ],
)
def test_invalid_reload_is_rejected_whole(
    core: ServerCore, models: Path, change: str, error: type[Exception], message: str
) -> None:
    """A reload that does not validate changes nothing: the old config keeps serving."""
    add_version(models / "c", 1)
    new_c = python_model(models, "c")
    broken = {
        "platform": ModelConfig("a", str(models / "a"), model_platform="tensorflow"),
        "unknown-platform": ModelConfig("a", str(models / "a"), model_platform="onnx"),
        "relative-path": ModelConfig("a", "a", model_platform="python"),
        "label-unavailable": python_model(models, "a", version_labels={"stable": 7}),
    }[change]
    before = core.config
    with pytest.raises(error, match=message):
        core.reload_config(ModelServerConfig((broken, new_c)))
    assert core.config == before
    assert "c" not in core.list_models()
    assert predict(core, ModelSpec.latest("a")) == 1.0


def test_labels_select_versions(models: Path) -> None:
    """Labels pointing at available versions route requests; unknown labels are refused."""
    add_version(models / "a", 2)
    every = python_model(models, "a", version_policy=ServableVersionPolicy.all())
    with ServerCore(ModelServerConfig((every,)), options()) as core:
        # The start waits for a version of each model; labels need theirs available.
        wait_until(lambda: len(core.manager.list_available_servable_ids()) == 2)
        labeled = python_model(
            models,
            "a",
            version_policy=ServableVersionPolicy.all(),
            version_labels={"stable": 1, "canary": 2},
        )
        core.reload_config(ModelServerConfig((labeled,)))
        assert predict(core, ModelSpec.labeled("a", "stable")) == 1.0
        assert predict(core, ModelSpec.labeled("a", "canary")) == 2.0
        with pytest.raises(InvalidArgumentError, match="Unrecognized servable version label"):
            predict(core, ModelSpec.labeled("a", "beta"))


def test_labels_for_unavailable_versions_when_allowed(models: Path) -> None:
    """With allow_version_labels_for_unavailable_models a start config may label any version."""
    config = ModelServerConfig((python_model(models, "a", version_labels={"next": 1}),))
    with ServerCore(config, options(allow_version_labels_for_unavailable_models=True)) as core:
        assert predict(core, ModelSpec.labeled("a", "next")) == 1.0


def test_explicit_load_and_unload(core: ServerCore, models: Path) -> None:
    """load_model adds one model and waits for it; unload_model removes one."""
    add_version(models / "c", 1)
    core.load_model(python_model(models, "c"))
    assert predict(core, ModelSpec.latest("c")) == 1.0
    core.unload_model("b")
    assert core.list_models() == ["a", "c"]
    with pytest.raises(NotFoundError):
        core.unload_model("b")


def test_broken_model_fails_start_naming_it(models: Path) -> None:
    """By default (as TF Serving) a model that cannot load fails the start, saying why."""
    add_version(models / "bad", 1, broken=True)
    config = ModelServerConfig((python_model(models, "a"), python_model(models, "bad")))
    with pytest.raises(UnknownError, match=r"1 model\(s\) did not become available: bad: .*broken"):
        ServerCore(config, options())


def test_broken_model_with_start_degraded_serves_the_others(models: Path) -> None:
    """With start_degraded the healthy models serve; the broken one reports its error."""
    add_version(models / "bad", 1, broken=True)
    config = ModelServerConfig((python_model(models, "a"), python_model(models, "bad")))
    with ServerCore(config, options(start_degraded=True)) as core:
        assert predict(core, ModelSpec.latest("a")) == 1.0
        assert "bad" in core.failed_models()
        status = core.model_status("bad")
        assert status.error is not None
        assert "broken" in status.error.message
        assert not core.ready()  # a configured model has no available version


def test_missing_base_path_fails_fast(tmp_path: Path) -> None:
    """A model whose base path does not exist fails at once with NOT_FOUND naming the path."""
    config = ModelServerConfig((python_model(tmp_path, "nowhere"),))
    with pytest.raises(NotFoundError, match="nowhere: Could not find base path"):
        ServerCore(config, options())


def test_broken_version_beside_a_good_one_is_not_a_failed_model(models: Path) -> None:
    """A model with a good and a broken version serves the good one and shows the error."""
    add_version(models / "a", 2, broken=True)
    config = ModelServerConfig(
        (python_model(models, "a", version_policy=ServableVersionPolicy.latest(2)),)
    )
    with ServerCore(config, options()) as core:
        assert core.failed_models() == {}
        assert predict(core, ModelSpec.latest("a")) == 1.0
        # Both versions load at once: version 1 may serve before version 2's failure is in.
        wait_until(lambda: core.model_status("a").versions[0].error is not None)
        newest = core.model_status("a").versions[0]
        assert newest.version == 2
        assert newest.state is ManagerState.END


def test_memory_limit_refuses_a_model(models: Path) -> None:
    """A model that does not fit total_model_memory_limit_bytes fails RESOURCE_EXHAUSTED."""
    (models / "a" / "1" / "weights.bin").write_bytes(b"\0" * 10_000)
    config = ModelServerConfig((python_model(models, "b"), python_model(models, "a")))
    with ServerCore(
        config, options(total_model_memory_limit_bytes=5_000, start_degraded=True)
    ) as core:
        assert predict(core, ModelSpec.latest("b")) == 1.0
        error = core.failed_models()["a"]
        assert error.code is StatusCode.RESOURCE_EXHAUSTED


def test_unknown_model_status_is_not_found(core: ServerCore) -> None:
    """Status of a model nobody configured is NOT_FOUND."""
    with pytest.raises(NotFoundError, match="Could not find any versions of model zzz"):
        core.model_status("zzz")


def test_close_is_idempotent_and_unloads(models: Path) -> None:
    """close() unloads every model, twice is fine, and the core is no longer ready."""
    core = ServerCore(ModelServerConfig((python_model(models, "a"),)), options())
    core.close()
    core.close()
    assert not core.ready()
    assert core.manager.list_available_servable_ids() == []


def test_serves_the_shipped_tensorflow_example(tmp_path: Path) -> None:
    """The shipped half_plus_two SavedModel serves through ServerCore (TensorFlow platform)."""
    from servinglib.examples import HALF_PLUS_TWO

    base = tmp_path / "half_plus_two"
    shutil.copytree(HALF_PLUS_TWO, base)
    config = ModelServerConfig((ModelConfig("half_plus_two", str(base)),))
    with ServerCore(config, options()) as core:
        spec = ModelSpec.latest("half_plus_two")
        with core.servable_handle(spec) as handle:
            y = call_signature(handle.servable, None, {"x": np.array([1.0, 2.0], np.float32)})
        assert core.model_metadata(spec).platform == "tensorflow"
        assert handle.id.version == 2
        assert y["y"].tolist() == [3.5, 4.0]  # version 2: y = 0.5 x + 3


def test_deleted_model_directory_keeps_serving_with_versions_always_present(
    models: Path,
) -> None:
    """With servable_versions_always_present, removing the files keeps serving and reports it."""
    config = ModelServerConfig((python_model(models, "a"),))
    fast_polls = options(
        source=FileSystemStoragePathSourceConfig(
            file_system_poll_wait_seconds=0.1, servable_versions_always_present=True
        )
    )
    with ServerCore(config, fast_polls) as core:
        os.rename(models / "a", models / "a.removed")  # the base path is gone
        wait_until(lambda: core.model_status("a").error is not None)
        error = core.model_status("a").error
        assert error is not None
        assert error.code is StatusCode.NOT_FOUND
        assert predict(core, ModelSpec.latest("a")) == 1.0
        assert core.ready()


def test_a_model_removed_and_added_again_loads_cleanly(core: ServerCore, models: Path) -> None:
    """Re-adding a just-removed model waits for its new load, not its old END state."""
    b = python_model(models, "b")
    for _ in range(10):
        core.unload_model("b")
        wait_until(lambda: core.model_status("b").versions[0].state is ManagerState.END)
        core.load_model(b)  # raised "No version of model b loaded" when the old END counted
        assert predict(core, ModelSpec.latest("b")) == 1.0
    assert core.failed_models() == {}


def test_a_model_added_again_while_its_unload_runs_loads(core: ServerCore, models: Path) -> None:
    """Re-adding a model whose unload is still running waits for the new load, whatever order
    the old version's END and the new load are published in."""
    b = python_model(models, "b")
    for _ in range(10):
        core.unload_model("b")
        core.load_model(b)  # raised "No version of model b loaded" when the END came later
        assert predict(core, ModelSpec.latest("b")) == 1.0
    assert core.failed_models() == {}


def test_a_model_failed_at_start_recovers_when_its_files_appear(tmp_path: Path) -> None:
    """With start_degraded, a model whose base path appears later serves and is failed no more."""
    config = ModelServerConfig((python_model(tmp_path, "late"),))
    fast_polls = options(
        start_degraded=True,
        source=FileSystemStoragePathSourceConfig(file_system_poll_wait_seconds=0.1),
    )
    with ServerCore(config, fast_polls) as core:
        assert "late" in core.failed_models()
        add_version(tmp_path / "late", 1)
        wait_until(lambda: core.failed_models() == {})
        assert predict(core, ModelSpec.latest("late")) == 1.0
        assert core.model_status("late").error is None


def test_drain_turns_readiness_off_but_keeps_serving(core: ServerCore) -> None:
    """After drain(), ready() is False for good while requests are still answered."""
    assert core.ready()
    core.drain()
    assert core.draining
    assert not core.ready()
    assert predict(core, ModelSpec.latest("a"), 1.0) == 2.0


def test_an_embedded_core_logs_loads_unloads_and_failures(
    models: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Loads, unloads, failures and retries are logged by servinglib's loggers, no handler added."""
    add_version(models / "bad", 1, broken=True)
    config = ModelServerConfig((python_model(models, "a"), python_model(models, "bad")))
    with (
        caplog.at_level("INFO", logger="servinglib"),
        ServerCore(config, options(start_degraded=True)),
    ):
        pass
    lines = [(r.name, r.levelname, r.getMessage()) for r in caplog.records]
    assert ("servinglib.server", "INFO", "a v1 loading") in lines
    assert ("servinglib.server", "INFO", "a v1 unloading") in lines
    messages = [message for _, _, message in lines]
    assert any(m.startswith("a v1 available in ") for m in messages)
    assert any(m.startswith("a v1 unloaded in ") for m in messages)
    failed = [m for name, level, m in lines if level == "ERROR" and m.startswith("bad v1 failed")]
    assert len(failed) == 1
    assert "this version is broken" in failed[0]
    retry = [m for name, _, m in lines if name == "servinglib.core.loader_harness"]
    assert len(retry) == 1
    assert retry[0].endswith("no more retries (1 attempt, max_num_load_retries=0)")
    assert messages.count("a v1 loading") == 1  # one line per change, not one per listener
    servinglib_loggers = [
        logging.getLogger(name)
        for name in logging.root.manager.loggerDict
        if name == "servinglib" or name.startswith("servinglib.")
    ]
    assert [lg.name for lg in servinglib_loggers if lg.handlers] == []


def held_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "still held" in r.getMessage()]


def test_leaving_with_a_handle_held_logs_it_until_released(
    models: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Closing waits for a held handle, logging which servable and how long, again and again."""
    monkeypatch.setattr("servinglib.core.basic_manager._HELD_FIRST_REPORT_S", 0.2)
    monkeypatch.setattr("servinglib.core.basic_manager._HELD_REPORT_EVERY_S", 0.2)
    core = ServerCore(ModelServerConfig((python_model(models, "a"),)), options())
    handle = core.servable_handle(ModelSpec.latest("a"))

    def release_after_two_reports() -> None:
        wait_until(lambda: len(held_lines(caplog)) >= 2, timeout_s=30)
        handle.release()

    releaser = threading.Thread(target=release_after_two_reports)
    with caplog.at_level("WARNING", logger="servinglib.core.basic_manager"):
        releaser.start()
        with core:
            pass  # leaving the block closes the core while the handle is held
    releaser.join(30)
    lines = held_lines(caplog)
    assert len(lines) >= 2
    assert lines[0].startswith("Unloading servable {name: a version: 1} waits for 1 handle(s)")
    assert core.model_status("a").versions[0].state is ManagerState.END


def test_a_bounded_close_returns_while_a_handle_is_held(
    models: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """close(timeout_s) returns False after the bound naming the held handle; unloading goes on."""
    core = ServerCore(ModelServerConfig((python_model(models, "a"),)), options())
    handle = core.servable_handle(ModelSpec.latest("a"))
    with caplog.at_level("WARNING", logger="servinglib.server.server_core"):
        assert core.close(timeout_s=0.2) is False
    [line] = [r.getMessage() for r in caplog.records if r.name == "servinglib.server.server_core"]
    assert "unloading goes on in the background" in line
    assert "{name: a version: 1} (1 handle(s), " in line
    assert not core.ready()
    handle.release()
    assert core.close(timeout_s=30) is True
    assert core.model_status("a").versions[0].state is ManagerState.END


def test_server_core_entry_points_check_their_argument_types(tmp_path: Path) -> None:
    """ServerCore's calls name ModelSpec, ModelConfig, ModelServerConfig or str as expected."""
    with ServerCore() as core:
        with pytest.raises(TypeError, match=r"must be a ModelSpec .*not ServableRequest"):
            core.servable_handle(ServableRequest.latest("m"))  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"must be a ModelSpec .*not str"):
            core.model_metadata("m")  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"must be a ModelServerConfig .*not list"):
            core.reload_config([])  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"must be a ModelConfig .*not str"):
            core.load_model(str(tmp_path))  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"must be a model name \(str\), not ModelSpec"):
            core.unload_model(ModelSpec.latest("m"))  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"must be a model name \(str\), not ModelSpec"):
            core.model_status(ModelSpec.latest("m"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"config must be a ModelServerConfig or None, not list"):
        ServerCore([])  # type: ignore[arg-type]
