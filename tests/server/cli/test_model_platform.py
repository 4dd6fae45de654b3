"""--model_base_path's platform: --model_platform, else inferred from its version directories."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from servinglib.errors import InvalidArgumentError, NotFoundError
from servinglib.examples import HALF_PLUS_TWO, PYTHON_HALF_PLUS_TWO
from servinglib.loaders.platform_inference import infer_model_platform
from servinglib.loaders.registry import Platform, PlatformRegistry
from servinglib.server.cli import parse_flags
from servinglib.server.cli.model_platform import flag_model


def test_a_savedmodel_is_served_by_tensorflow() -> None:
    """Version directories holding a SavedModel infer the tensorflow platform."""
    choice = infer_model_platform(HALF_PLUS_TWO)
    assert choice.platform == "tensorflow"
    assert "inferred from version 2" in choice.reason


def test_a_model_py_is_served_by_python() -> None:
    """Version directories holding a model.py infer the python platform."""
    assert infer_model_platform(PYTHON_HALF_PLUS_TWO).platform == "python"


def test_the_highest_recognized_version_decides(tmp_path: Path) -> None:
    """A newer version still empty (being written) does not hide what the older one holds."""
    shutil.copytree(Path(PYTHON_HALF_PLUS_TWO) / "1", tmp_path / "1")
    (tmp_path / "2").mkdir()
    (tmp_path / "notes").mkdir()
    choice = infer_model_platform(str(tmp_path))
    assert (choice.platform, choice.reason) == ("python", "inferred from version 1's files")


def test_without_versions_tf_servings_default_is_kept_and_said(tmp_path: Path) -> None:
    """No version directory yet: tensorflow, TF Serving's default, with the reason."""
    choice = infer_model_platform(str(tmp_path))
    assert choice.platform == "tensorflow"
    assert "holds no version directory yet" in choice.reason
    assert "--model_platform" in choice.reason


def test_a_bare_model_in_the_base_path_decides(tmp_path: Path) -> None:
    """A model.py put straight into the base path (no version directory) is a python model."""
    shutil.copy(Path(PYTHON_HALF_PLUS_TWO) / "1" / "model.py", tmp_path / "model.py")
    choice = infer_model_platform(str(tmp_path))
    assert (choice.platform, choice.reason) == (
        "python",
        f"inferred from the model in {tmp_path} itself, served as version 0",
    )


def test_a_version_holding_two_platforms_files_is_refused(tmp_path: Path) -> None:
    """A version with both a SavedModel and a model.py is an error naming both."""
    shutil.copytree(Path(HALF_PLUS_TWO) / "1", tmp_path / "1")
    shutil.copy(Path(PYTHON_HALF_PLUS_TWO) / "1" / "model.py", tmp_path / "1" / "model.py")
    with pytest.raises(InvalidArgumentError, match="python and tensorflow"):
        infer_model_platform(str(tmp_path))


def test_a_registered_platform_is_recognized_by_its_files(tmp_path: Path) -> None:
    """A platform registered with its own files is inferred from them: the registry decides."""
    registry = PlatformRegistry([Platform("onnx", "mypkg:make", recognizes=("model.onnx",))])
    (tmp_path / "3").mkdir()
    (tmp_path / "3" / "model.onnx").write_bytes(b"")
    assert infer_model_platform(str(tmp_path), registry).platform == "onnx"


def test_a_uri_of_no_object_store_keeps_the_default() -> None:
    """A URI no store serves is not looked into: tensorflow, and the reason says so (an
    object store's keys are looked at: tests/sources/test_remote_storage.py)."""
    choice = infer_model_platform("hdfs://namenode/m")
    assert choice.platform == "tensorflow"
    assert "not looked into" in choice.reason


def test_the_flag_wins_and_inference_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    """--model_platform is taken as given; without it one log line names the inferred one."""
    given = parse_flags(
        [f"--model_base_path={PYTHON_HALF_PLUS_TWO}", "--model_platform=mine"], environ={}
    )
    assert flag_model(given).model_platform == "mine"
    with caplog.at_level(logging.INFO, logger="servinglib.server"):
        model = flag_model(parse_flags([f"--model_base_path={PYTHON_HALF_PLUS_TWO}"], environ={}))
    assert model.model_platform == "python"
    assert caplog.messages == ["Model default: platform python (inferred from version 1's files)"]


def test_the_flag_without_a_base_path_is_refused() -> None:
    """--model_platform beside a config file alone is a flag error: the file names platforms."""
    from servinglib.server.cli import FlagError

    with pytest.raises(FlagError, match="--model_platform"):
        parse_flags(["--model_config_file=/m.config", "--model_platform=python"], environ={})


def test_a_version_named_with_leading_zeros_is_looked_into(tmp_path: Path) -> None:
    """Version directory 007 is version 7, and its own files decide."""
    shutil.copytree(Path(PYTHON_HALF_PLUS_TWO) / "1", tmp_path / "007")
    (tmp_path / "3").mkdir()
    choice = infer_model_platform(str(tmp_path))
    assert (choice.platform, choice.reason) == ("python", "inferred from version 007's files")


def test_a_missing_base_path_is_said_as_missing(tmp_path: Path) -> None:
    """A base path that does not exist is not 'a directory without versions'."""
    choice = infer_model_platform(str(tmp_path / "absent"))
    assert "does not exist (yet)" in choice.reason


def test_a_missing_model_base_path_fails_before_any_runtime(tmp_path: Path) -> None:
    """--model_base_path naming nothing fails at once, naming it (no 3 s TensorFlow import
    first); with --start_degraded it is kept, as it may appear later."""
    absent = tmp_path / "absent"
    with pytest.raises(NotFoundError, match=f"--model_base_path {absent} does not exist"):
        flag_model(parse_flags([f"--model_base_path={absent}"], environ={}))
    (tmp_path / "file").write_text("")
    with pytest.raises(NotFoundError, match="is not a directory"):
        flag_model(parse_flags([f"--model_base_path={tmp_path / 'file'}"], environ={}))
    kept = flag_model(parse_flags([f"--model_base_path={absent}", "--start_degraded"], environ={}))
    assert kept.base_path == str(absent)
