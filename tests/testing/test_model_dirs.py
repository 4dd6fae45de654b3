"""Tests for make_version_dirs and write_python_model: version directories written aside and
renamed into place."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from servinglib.loaders import PythonLoader
from servinglib.servable import call_signature
from servinglib.sources import (
    FileSystemStoragePathSource,
    FileSystemStoragePathSourceConfig,
    ServableToMonitor,
    ServableVersionPolicy,
    StoragePath,
    connect,
)
from servinglib.testing import RecordingTarget, make_version_dirs, write_python_model


def test_makes_one_directory_per_version_holding_the_files(tmp_path: Path) -> None:
    """Every version gets the files (str as UTF-8, bytes as is, subdirectories made)."""
    files = {"model.txt": "weights ✓", "assets/vocab.bin": b"\x00\x01"}

    base = make_version_dirs(tmp_path, "m", [1, 2], files)

    assert base == tmp_path / "m"
    assert sorted(os.listdir(base)) == ["1", "2"]
    assert (base / "2" / "model.txt").read_text(encoding="utf-8") == "weights ✓"
    assert (base / "1" / "assets" / "vocab.bin").read_bytes() == b"\x00\x01"


def test_files_may_differ_per_version(tmp_path: Path) -> None:
    """A function of the version gives each version its own files; None leaves them empty."""
    base = make_version_dirs(tmp_path, "m", [3, 4], lambda v: {"v.txt": str(v)})
    make_version_dirs(tmp_path, "empty", [1])

    assert (base / "4" / "v.txt").read_text() == "4"
    assert os.listdir(tmp_path / "empty" / "1") == []


def test_adds_versions_beside_existing_ones_but_never_overwrites(tmp_path: Path) -> None:
    """A second call adds versions; an existing version raises FileExistsError, left intact."""
    make_version_dirs(tmp_path, "m", [1], {"a": "old"})
    make_version_dirs(tmp_path, "m", [2])

    with pytest.raises(FileExistsError, match="already exists"):
        make_version_dirs(tmp_path, "m", [1], {"a": "new"})

    assert sorted(os.listdir(tmp_path / "m")) == ["1", "2"]  # no staging directory left
    assert (tmp_path / "m" / "1" / "a").read_text() == "old"


@pytest.mark.parametrize("path", ["/etc/passwd", "../escape", "a/../../b", ""])
def test_file_paths_must_stay_in_the_version_directory(tmp_path: Path, path: str) -> None:
    """Absolute paths and paths leaving the version directory are refused, nothing left behind."""
    with pytest.raises(ValueError, match="stay in the version directory"):
        make_version_dirs(tmp_path, "m", [1], {path: "x"})

    assert os.listdir(tmp_path / "m") == []


@pytest.mark.parametrize("version", [-1, True, "1"])
def test_versions_are_non_negative_ints(tmp_path: Path, version: object) -> None:
    """A negative, bool or str version is a ValueError."""
    with pytest.raises(ValueError, match="a version is an int >= 0"):
        make_version_dirs(tmp_path, "m", [version])  # type: ignore[list-item]


def test_a_file_system_source_sees_exactly_the_versions(tmp_path: Path) -> None:
    """The file-system source aspires the versions made, and no staging directory."""
    base = make_version_dirs(tmp_path, "m", [1, 2, 7], {"model.txt": "x"})
    config = FileSystemStoragePathSourceConfig(
        [ServableToMonitor("m", str(base), ServableVersionPolicy.all())],
        file_system_poll_wait_seconds=-1,
    )
    target: RecordingTarget[StoragePath] = RecordingTarget()
    with FileSystemStoragePathSource(config) as source:
        connect(source, target)
        source.poll_once()

    versions = target.last("m")
    assert versions is not None
    assert sorted(item.id.version for item in versions) == [1, 2, 7]


def test_write_python_model_writes_a_version_the_python_platform_serves(tmp_path: Path) -> None:
    """The indented source becomes <name>/<version>/model.py beside the files, and it loads."""
    source = """
        from pathlib import Path

        from servinglib.loaders import PythonModel, signature
        from servinglib.servable import TensorSpec

        class Model(PythonModel):
            def load(self, path):
                self.offset = float((Path(path) / "offset.txt").read_text())

            @signature(name="serving_default", inputs=[TensorSpec("x", "float32", [-1])],
                       outputs=[TensorSpec("y", "float32", [-1])])
            def add(self, x):
                return {"y": x + self.offset}
    """

    base = write_python_model(tmp_path, "m", source, version=3, files={"offset.txt": "0.5"})

    assert base == tmp_path / "m"
    assert sorted(os.listdir(base / "3")) == ["model.py", "offset.txt"]
    loader = PythonLoader(str(base / "3"))
    loader.load()
    try:
        outputs = call_signature(loader.servable(), None, {"x": np.array([1.0], np.float32)})
    finally:
        loader.unload()
    assert outputs["y"].tolist() == [1.5]
    with pytest.raises(FileExistsError, match="already exists"):
        write_python_model(tmp_path, "m", source, version=3)
