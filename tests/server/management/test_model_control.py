"""ModelControl and ModelRepository: Triton's model control modes over a repository, in process."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from servinglib.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ServingError,
    UnavailableError,
)
from servinglib.server import ModelConfig, ModelManagement, ModelServerConfig, ServerCore
from servinglib.server.management.model_control import ModelControl, ModelControlMode
from servinglib.server.management.repository import ModelRepository
from servinglib.server.triton_repository import TritonRepository
from servinglib.testing.plugin import TEST_SERVER_CORE_OPTIONS
from tests.server.triton_models import ADD_SUB, BAD, UNBATCHED, write_model
from tests.triton.pipeline_models import write_pipeline_repository


@pytest.fixture
def repository(tmp_path: Path) -> TritonRepository:
    """A repository of add_sub and sub_add (both loadable) and broken (a bad config)."""
    for name in ("add_sub", "sub_add"):
        write_model(tmp_path / "repo", name, ADD_SUB)
    write_model(tmp_path / "repo", "broken", BAD)
    return TritonRepository(tmp_path / "repo")


@pytest.fixture
def core(tmp_path: Path) -> Iterator[ServerCore]:
    """A core serving nothing yet but ``own``, a model of its config outside the repository."""
    own = write_model(tmp_path / "elsewhere", "own", ADD_SUB)
    with ServerCore(
        ModelServerConfig([ModelConfig.python("own", own)]), TEST_SERVER_CORE_OPTIONS
    ) as c:
        yield c


def _repository(core: ServerCore, repository: TritonRepository, mode: str) -> ModelRepository:
    control = ModelControl(repository, ModelControlMode(mode))
    return ModelRepository(core, ModelManagement(core, control=control))


@pytest.mark.parametrize("mode", ["none", "poll"])
def test_loads_and_unloads_are_refused_outside_explicit_mode(
    core: ServerCore, repository: TritonRepository, mode: str
) -> None:
    """In none and poll modes every load and unload is UNAVAILABLE, as Triton answers."""
    models = _repository(core, repository, mode)
    for call in (
        lambda: models.load_blocking("add_sub", {}),
        lambda: models.unload_blocking("own"),
        lambda: models.load_blocking("x", {"config": '{"base_path": "/x"}'}),
    ):
        with pytest.raises(UnavailableError, match="not allowed if polling is enabled"):
            call()
    assert core.list_models() == ["own"]


def test_explicit_mode_loads_and_unloads_repository_models_by_name(
    core: ServerCore, repository: TritonRepository
) -> None:
    """A load names a model directory of the repository; an unload removes it again."""
    models = _repository(core, repository, "explicit")
    models.load_blocking("add_sub", {})
    assert core.list_models() == ["add_sub", "own"]
    assert core.ready()
    models.unload_blocking("add_sub")
    assert core.list_models() == ["own"]
    models.unload_blocking("add_sub")  # not served: nothing to do


def test_a_reload_serves_the_changed_config(core: ServerCore, repository: TritonRepository) -> None:
    """Loading a served model whose config.pbtxt changed serves the new config."""
    models = _repository(core, repository, "explicit")
    models.load_blocking("add_sub", {})
    models.load_blocking("add_sub", {})  # unchanged: still served
    assert core.ready()
    write_model(Path(repository.path), "add_sub", UNBATCHED)
    models.load_blocking("add_sub", {})
    served = core.config.model("add_sub")
    assert served is not None
    assert served.triton_config is not None
    assert served.triton_config.message.max_batch_size == 0
    assert core.ready()


def test_a_failed_load_leaves_nothing_configured(
    core: ServerCore, repository: TritonRepository
) -> None:
    """A model that cannot be served is refused naming why, and readiness stays."""
    models = _repository(core, repository, "explicit")
    with pytest.raises(InvalidArgumentError, match=r"config\.pbtxt"):
        models.load_blocking("broken", {})
    with pytest.raises(NotFoundError, match="not in the model repository"):
        models.load_blocking("absent", {})
    assert core.list_models() == ["own"]
    assert core.ready()


def test_a_name_outside_the_repository_is_left_to_remote_management(
    core: ServerCore, repository: TritonRepository
) -> None:
    """Unloading the config's own model needs --allow_remote_model_management, as before."""
    models = _repository(core, repository, "explicit")
    with pytest.raises(PermissionDeniedError, match="--allow_remote_model_management"):
        models.unload_blocking("own")


def test_a_repository_model_named_like_a_config_model_is_refused(
    core: ServerCore, repository: TritonRepository
) -> None:
    """The config's model keeps its name: loading the repository's namesake is refused."""
    write_model(Path(repository.path), "own", ADD_SUB)
    with pytest.raises(FailedPreconditionError, match="model config"):
        ModelControl(repository, ModelControlMode.EXPLICIT).load(core, "own")


def test_the_index_lists_the_repository_s_models_not_served(
    core: ServerCore, repository: TritonRepository
) -> None:
    """Repository models never served are listed by name alone beside those that serve."""
    models = _repository(core, repository, "explicit")
    models.load_blocking("add_sub", {})
    index = {(e.name, e.version, e.state) for e in models.index()}
    assert index == {
        ("add_sub", "1", "READY"),
        ("broken", "", ""),
        ("own", "1", "READY"),
        ("sub_add", "", ""),
    }


def test_names_a_client_sends_find_nothing_outside_the_repository(
    core: ServerCore, repository: TritonRepository
) -> None:
    """``..``, a path, NUL, CR/LF, a megabyte and 10,000 distinct names are NOT_FOUND, and
    leave nothing behind."""
    models = _repository(core, repository, "explicit")
    names = ["..", ".", "add_sub/../add_sub", "x\0y", "a\r\nb", "m" * (1 << 20)]
    names += [f"unknown_{i}" for i in range(10_000)]
    for name in names:
        with pytest.raises(NotFoundError):
            models.load_blocking(name, {})
        models.unload_blocking(name)
    assert core.list_models() == ["own"]
    assert set(core.known_models()) == {"own"}


def test_loading_an_ensemble_loads_its_steps(core: ServerCore, tmp_path: Path) -> None:
    """In explicit mode an ensemble's load loads its step models first, as Triton does."""
    repository = write_pipeline_repository(tmp_path / "pipelines", tmp_path)
    models = _repository(core, TritonRepository(repository), "explicit")
    models.load_blocking("pipeline", {})
    assert core.list_models() == ["double", "own", "pipeline", "post", "pre"]
    assert core.ready()


def test_a_faulty_ensemble_fails_its_load_naming_the_fault(
    core: ServerCore, tmp_path: Path
) -> None:
    """An ensemble calling a model the repository lacks fails its load in one line naming both."""
    repository = write_pipeline_repository(tmp_path / "pipelines", tmp_path)
    shutil.rmtree(repository / "double")
    models = _repository(core, TritonRepository(repository), "explicit")
    with pytest.raises(ServingError) as caught:
        models.load_blocking("pipeline", {})
    assert "Ensemble pipeline: its step model double: Model double is not in the model" in str(
        caught.value
    )
    assert "\n" not in str(caught.value)
