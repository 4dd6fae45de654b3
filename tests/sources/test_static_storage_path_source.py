"""Tests for servinglib.sources.static_storage_path_source: one fixed version, once connected."""

from __future__ import annotations

import pytest

from servinglib.core.servable_data import ServableData
from servinglib.core.servable_id import ServableId
from servinglib.errors import FailedPreconditionError
from servinglib.sources.source import StoragePath
from servinglib.sources.static_storage_path_source import StaticStoragePathSource
from servinglib.sources.target import connect
from servinglib.testing import RecordingTarget

PATH = "/models/resnet/3"


def test_emits_exactly_one_version_once_connected() -> None:
    """Connecting delivers one call: the servable's name with its single version at the path."""
    source = StaticStoragePathSource("resnet", 3, PATH)
    target: RecordingTarget[StoragePath] = RecordingTarget()
    connect(source, target)
    [call] = target.calls()
    assert call.name == "resnet"
    assert call.versions == (ServableData.of(ServableId("resnet", 3), PATH),)


def test_id_names_the_version() -> None:
    """The source's id is the servable id it aspires."""
    assert StaticStoragePathSource("resnet", 0, PATH).id == ServableId("resnet", 0)


def test_connecting_twice_fails_without_re_emitting() -> None:
    """A second connect raises FailedPreconditionError and the version is not sent again."""
    source = StaticStoragePathSource("resnet", 3, PATH)
    first: RecordingTarget[StoragePath] = RecordingTarget()
    second: RecordingTarget[StoragePath] = RecordingTarget()
    connect(source, first)
    with pytest.raises(FailedPreconditionError):
        connect(source, second)
    assert len(first.calls()) == 1
    assert second.calls() == []


@pytest.mark.parametrize(("name", "version"), [("", 1), ("resnet", -1)])
def test_invalid_servable_id_is_rejected(name: str, version: int) -> None:
    """An empty name or a negative version fails at construction (ServableId's validation)."""
    with pytest.raises(ValueError, match="servable"):
        StaticStoragePathSource(name, version, PATH)
