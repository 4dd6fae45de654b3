"""TritonRepository: each model directory of a Triton repository as a ModelConfig, or why not."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from servinglib.errors import InvalidArgumentError, NotFoundError, StatusCode
from servinglib.server.config import ModelConfig, ModelServerConfig
from servinglib.server.triton_repository import TritonRepository, with_config_files
from servinglib.sources.version_policy import ServableVersionPolicy
from tests.server.triton_models import ADD_SUB, ALL_VERSIONS, BAD, BATCHED, GPU, write_model


def test_a_config_pbtxt_maps_onto_a_model_config(tmp_path: Path) -> None:
    """A python model's directory becomes ModelConfig(name, dir, "python") with its config."""
    directory = write_model(tmp_path, "add_sub", ADD_SUB)
    model = TritonRepository(tmp_path).model("add_sub")
    assert (model.name, model.base_path, model.model_platform) == (
        "add_sub",
        str(directory),
        "python",
    )
    assert model.version_policy == ServableVersionPolicy.latest()
    assert model.model_filename == ""
    assert model.triton_config is not None
    assert model.triton_config.message.instance_group[0].name == "add_sub_0"  # completed


def test_the_version_policy_is_the_config_s(tmp_path: Path) -> None:
    """version_policy { all {} } becomes ServableVersionPolicy.all()."""
    write_model(tmp_path, "every", ALL_VERSIONS, versions=(1, 2))
    assert TritonRepository(tmp_path).model("every").version_policy == (ServableVersionPolicy.all())


@pytest.mark.parametrize("platform", ['platform: "tensorflow_savedmodel"', 'backend: "tensorflow"'])
def test_a_savedmodel_is_loaded_from_its_model_file(tmp_path: Path, platform: str) -> None:
    """A TensorFlow model is served by the tensorflow platform from <version>/model.savedmodel."""
    (tmp_path / "tf" / "1" / "model.savedmodel").mkdir(parents=True)
    (tmp_path / "tf" / "config.pbtxt").write_text(platform)
    model = TritonRepository(tmp_path).model("tf")
    assert (model.model_platform, model.model_filename) == ("tensorflow", "model.savedmodel")


def test_a_savedmodel_without_config_is_auto_completed(tmp_path: Path) -> None:
    """Without config.pbtxt, a version holding model.savedmodel is a SavedModel, as Triton has
    it."""
    (tmp_path / "tf" / "3" / "model.savedmodel").mkdir(parents=True)
    model = TritonRepository(tmp_path).model("tf")
    assert (model.model_platform, model.model_filename) == ("tensorflow", "model.savedmodel")
    assert model.triton_config is not None
    assert model.triton_config.message.platform == "tensorflow_savedmodel"


@pytest.mark.parametrize(
    ("config", "code", "words"),
    [
        ('backend: "onnxruntime"', StatusCode.UNIMPLEMENTED, "onnxruntime backend"),
        (BAD, StatusCode.INVALID_ARGUMENT, "config.pbtxt"),
        (GPU, StatusCode.INVALID_ARGUMENT, "asks for a GPU"),
    ],
)
def test_models_that_cannot_be_served_are_refused_in_one_line(
    tmp_path: Path, config: str, code: StatusCode, words: str
) -> None:
    """Another backend, a bad config and a GPU are each one line naming why."""
    write_model(tmp_path, "m", config)
    write_model(tmp_path, "fine", ADD_SUB)
    scan = TritonRepository(tmp_path).scan()
    assert [m.name for m in scan.models] == ["fine"]
    assert scan.errors["m"].code is code
    assert words in scan.errors["m"].message
    assert "\n" not in scan.errors["m"].message
    assert scan.names == ("fine", "m")


def test_a_directory_without_a_model_is_refused(tmp_path: Path) -> None:
    """A directory with neither config.pbtxt nor a model file auto-complete knows is refused."""
    (tmp_path / "empty" / "1").mkdir(parents=True)
    with pytest.raises(InvalidArgumentError, match=r"no config\.pbtxt"):
        TritonRepository(tmp_path).model("empty")


@pytest.mark.parametrize("name", ["missing", "..", "a/b", "", "x\0y"])
def test_names_outside_the_repository_are_not_found(tmp_path: Path, name: str) -> None:
    """A name that is not a model directory of the repository is NOT_FOUND."""
    write_model(tmp_path / "repo", "m", ADD_SUB)
    write_model(tmp_path, "b", ADD_SUB)
    with pytest.raises(NotFoundError):
        TritonRepository(tmp_path / "repo").model(name)


def test_files_and_hidden_directories_are_not_models(tmp_path: Path) -> None:
    """Only visible directories are models."""
    write_model(tmp_path, "m", ADD_SUB)
    (tmp_path / ".cache").mkdir()
    (tmp_path / "README").write_text("x")
    assert TritonRepository(tmp_path).model_names() == ["m"]


def test_unimplemented_fields_are_warned_about_once_per_model(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """preserve_ordering is named in one warning, however often the model is read."""
    write_model(tmp_path, "batched_once", BATCHED)
    repository = TritonRepository(tmp_path)
    with caplog.at_level(logging.WARNING, logger="servinglib.server"):
        for _ in range(3):
            repository.scan()
    warnings = [r.getMessage() for r in caplog.records if "batched_once" in r.getMessage()]
    assert len(warnings) == 1
    assert "dynamic_batching.preserve_ordering" in warnings[0]


def test_a_savedmodel_instance_count_is_named_as_without_effect(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A SavedModel asking for two instances is served once, and the warning says why."""
    config = 'platform: "tensorflow_savedmodel"\ninstance_group [ { count: 2 kind: KIND_CPU } ]\n'
    write_model(tmp_path, "tf_twice", config)
    with caplog.at_level(logging.WARNING, logger="servinglib.server"):
        TritonRepository(tmp_path).model("tf_twice")
    (warning,) = [r.getMessage() for r in caplog.records if "tf_twice" in r.getMessage()]
    assert "instance_group.count (a SavedModel's calls already run concurrently)" in warning


def test_a_python_instance_count_is_applied_not_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A Python model's instance count is served, so no warning names it."""
    config = ADD_SUB.replace("KIND_CPU", "KIND_CPU count: 2")
    write_model(tmp_path, "py_twice", config)
    with caplog.at_level(logging.WARNING, logger="servinglib.server"):
        TritonRepository(tmp_path).model("py_twice")
    assert not [r for r in caplog.records if "instance_group" in r.getMessage()]


def test_with_models_keeps_the_other_models_and_refuses_a_name_in_both(tmp_path: Path) -> None:
    """The repository's models replace its own in a config; a name in both is an error."""
    repository = TritonRepository(tmp_path / "repo")
    mine = repository.model_config(str(write_model(tmp_path / "repo", "mine", ADD_SUB)))
    other = ModelConfig("other", tmp_path / "elsewhere", "python")
    old = ModelConfig("gone", tmp_path / "repo" / "gone", "python")
    served = ModelServerConfig([other, old])
    assert repository.with_models(served, [mine]).names == ("other", "mine")
    clash = ModelConfig("other", tmp_path / "repo" / "other", "python")
    with pytest.raises(InvalidArgumentError, match="Model other is both"):
        repository.with_models(served, [clash])


def test_a_models_config_entry_gets_the_config_pbtxt_beside_its_versions(tmp_path: Path) -> None:
    """A models.config model laid out as Triton's gets its config.pbtxt; its platform stays."""
    write_model(tmp_path, "dir_name", ADD_SUB)
    entry = ModelConfig("served_name", tmp_path / "dir_name", "python")
    plain = ModelConfig("plain", tmp_path / "plain", "python")
    (attached, kept) = with_config_files(ModelServerConfig([entry, plain])).models
    assert attached.triton_config is not None
    assert attached.triton_config.message.name == "served_name"
    assert kept == plain


def test_a_python_model_without_config_is_auto_completed(tmp_path: Path) -> None:
    """Without config.pbtxt, a version holding model.py is a Python-backend model, as Triton
    completes it (backend python, model.py, one instance group named after the model)."""
    (tmp_path / "py" / "1").mkdir(parents=True)
    (tmp_path / "py" / "1" / "model.py").write_text("")
    model = TritonRepository(tmp_path).model("py")
    assert model.model_platform == "python"
    assert model.triton_config is not None
    message = model.triton_config.message
    assert (message.backend, message.default_model_filename) == ("python", "model.py")
    assert message.instance_group[0].name == "py"


@pytest.mark.parametrize(("value", "expected"), [("true", True), ("False", False), (None, None)])
def test_the_load_on_demand_parameter_sets_the_model_s_residency(
    tmp_path: Path, value: str | None, expected: bool | None
) -> None:
    """parameters { key: "load_on_demand" } makes a model load on demand or pins it; absent,
    the server's --load_models_on_demand decides."""
    parameter = (
        ""
        if value is None
        else f'parameters {{ key: "load_on_demand" value: {{ string_value: "{value}" }} }}'
    )
    write_model(tmp_path, "add_sub", ADD_SUB + parameter)
    assert TritonRepository(tmp_path).model("add_sub").load_on_demand is expected


def test_a_load_on_demand_parameter_that_is_no_boolean_is_refused(tmp_path: Path) -> None:
    """A value other than true or false is INVALID_ARGUMENT naming the parameter."""
    parameter = 'parameters { key: "load_on_demand" value: { string_value: "soon" } }'
    write_model(tmp_path, "add_sub", ADD_SUB + parameter)
    with pytest.raises(InvalidArgumentError, match="load_on_demand"):
        TritonRepository(tmp_path).model("add_sub")
