"""RepositoryPoller: Triton's poll mode, stepped by hand on a real ServerCore."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from servinglib.core.servable_state import ManagerState
from servinglib.server import ModelConfig, ModelServerConfig, ModelSpec, ServerCore
from servinglib.server.repository_poller import RepositoryPoller
from servinglib.server.triton_repository import TritonRepository
from servinglib.testing import wait_until, write_python_model
from servinglib.testing.plugin import TEST_SERVER_CORE_OPTIONS
from tests.server.triton_models import ADD_SUB, BAD, UNBATCHED, write_model

OTHER_PY = """
from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec

class Model(PythonModel):
    @signature(inputs=[TensorSpec("x", "float32", [-1])],
               outputs=[TensorSpec("y", "float32", [-1])])
    def same(self, x):
        return {"y": x}
"""


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[ServerCore, TritonRepository, RepositoryPoller]]:
    """A core serving repository model ``a`` and model ``other`` of its own config."""
    repository = TritonRepository(tmp_path / "repo")
    write_model(tmp_path / "repo", "a", ADD_SUB)
    other = ModelConfig.python("other", write_python_model(tmp_path, "other", OTHER_PY))
    config = repository.with_models(ModelServerConfig([other]), repository.scan().models)
    with (
        ServerCore(config, TEST_SERVER_CORE_OPTIONS) as core,
        RepositoryPoller(core, repository, 3600, start=False) as poller,
    ):
        yield core, repository, poller


def _state(core: ServerCore, name: str) -> ManagerState | None:
    versions = core.monitor.get_version_states(name)
    return versions[1].state.manager_state if 1 in versions else None


def test_a_new_model_directory_is_loaded(
    served: tuple[ServerCore, TritonRepository, RepositoryPoller],
) -> None:
    """A model directory written after the start serves after the next poll."""
    core, repository, poller = served
    assert not poller.poll_once()  # nothing changed
    write_model(Path(repository.path), "b", ADD_SUB)
    assert poller.poll_once()
    assert core.list_models() == ["a", "b", "other"]
    assert _state(core, "b") is ManagerState.AVAILABLE


def test_a_removed_model_directory_is_unloaded(
    served: tuple[ServerCore, TritonRepository, RepositoryPoller],
) -> None:
    """A model directory removed is unloaded at the next poll; the config's own model stays."""
    core, repository, poller = served
    shutil.rmtree(Path(repository.path) / "a")
    assert poller.poll_once()
    assert core.list_models() == ["other"]
    wait_until(lambda: _state(core, "a") is ManagerState.END)
    assert _state(core, "other") is ManagerState.AVAILABLE


def test_a_changed_config_reloads_the_model(
    served: tuple[ServerCore, TritonRepository, RepositoryPoller],
) -> None:
    """A config.pbtxt edited is served after the next poll, the model loaded again."""
    core, repository, poller = served
    write_model(Path(repository.path), "a", UNBATCHED)  # its model.py takes whole tensors too
    assert poller.poll_once()
    model = core.config.model("a")
    assert model is not None
    assert model.triton_config is not None
    assert model.triton_config.message.max_batch_size == 0
    wait_until(lambda: _state(core, "a") is ManagerState.AVAILABLE)
    signature = core.model_metadata(ModelSpec.latest("a")).signatures["serving_default"]
    assert signature.inputs["INPUT0"].shape == (4,)


def test_a_bad_model_is_logged_once_and_the_others_serve(
    served: tuple[ServerCore, TritonRepository, RepositoryPoller],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A config that does not parse is logged at the poll that finds it, not at every poll."""
    core, repository, poller = served
    write_model(Path(repository.path), "broken", BAD)
    with caplog.at_level(logging.ERROR, logger="servinglib.server"):
        assert poller.poll_once()
        assert not poller.poll_once()
    lines = [r.getMessage() for r in caplog.records if "broken" in r.getMessage()]
    assert len(lines) == 1
    assert "is not served" in lines[0]
    assert core.list_models() == ["a", "other"]


def test_a_repository_model_named_like_a_config_model_is_not_served(
    served: tuple[ServerCore, TritonRepository, RepositoryPoller],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The model config's model keeps its name; the repository's namesake is logged."""
    core, repository, poller = served
    write_model(Path(repository.path), "other", ADD_SUB)
    with caplog.at_level(logging.ERROR, logger="servinglib.server"):
        assert poller.poll_once()
    assert any("other" in r.getMessage() for r in caplog.records)
    other = core.config.model("other")
    assert other is not None
    assert not repository.owns(other)
