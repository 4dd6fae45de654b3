"""ModelFileAdapter and check_inside: a model's file inside each version directory."""

from __future__ import annotations

from pathlib import Path

from servinglib.core.servable_data import ServableData
from servinglib.core.servable_id import ServableId
from servinglib.sources.model_file_adapter import ModelFileAdapter, check_inside
from servinglib.sources.target import connect
from servinglib.testing import RecordingTarget


def test_versions_of_a_model_with_a_model_file_are_joined_to_it() -> None:
    """m's versions go on as <version>/model.savedmodel, other servables' as they came."""
    adapter = ModelFileAdapter()
    target: RecordingTarget[str] = RecordingTarget()
    connect(adapter, target)
    adapter.update({"m": "model.savedmodel", "plain": ""})
    adapter.set_aspired_versions("m", [ServableData(ServableId("m", 1), "/r/m/1")])
    adapter.set_aspired_versions("plain", [ServableData(ServableId("plain", 1), "/r/plain/1")])
    assert [item.data for item in target.last("m") or ()] == ["/r/m/1/model.savedmodel"]
    assert [item.data for item in target.last("plain") or ()] == ["/r/plain/1"]


def test_the_version_check_looks_inside_the_model_file(tmp_path: Path) -> None:
    """A version is complete once its model file exists and passes the platform's check."""
    check = check_inside(lambda path: None if (Path(path) / "done").exists() else "no", "m.dir")
    assert check is not None
    assert check(str(tmp_path)) == "no m.dir yet"
    (tmp_path / "m.dir").mkdir()
    assert check(str(tmp_path)) == "no"
    (tmp_path / "m.dir" / "done").write_text("")
    assert check(str(tmp_path)) is None
    assert check_inside(None, "") is None


def test_checks_made_alike_compare_equal() -> None:
    """Two checks of one platform check and file are equal: a config diff sees no change."""
    assert check_inside(None, "model.savedmodel") == check_inside(None, "model.savedmodel")
