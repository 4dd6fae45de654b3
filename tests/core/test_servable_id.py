"""Tests for servinglib.core.servable_id."""

from __future__ import annotations

import attrs
import pytest

from servinglib.core.servable_id import ServableId


def test_holds_name_and_version() -> None:
    """A ServableId keeps the name and version it was built with."""
    servable_id = ServableId("mnist", 3)

    assert servable_id.name == "mnist"
    assert servable_id.version == 3


def test_version_zero_is_valid() -> None:
    """Version 0 is a legal version (versions are ints >= 0)."""
    assert ServableId("m", 0).version == 0


def test_empty_name_is_rejected() -> None:
    """An empty name raises ValueError."""
    with pytest.raises(ValueError, match="name"):
        ServableId("", 1)


def test_negative_version_is_rejected() -> None:
    """A negative version raises ValueError."""
    with pytest.raises(ValueError, match=">= 0"):
        ServableId("m", -1)


@pytest.mark.parametrize("version", [True, False, 1.0, "1", None])
def test_non_int_version_is_rejected(version: object) -> None:
    """A version that is not an int (bools included) raises TypeError."""
    with pytest.raises(TypeError, match="int"):
        ServableId("m", version)  # type: ignore[arg-type]


def test_is_immutable() -> None:
    """A ServableId cannot be changed after construction."""
    servable_id = ServableId("m", 1)

    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        servable_id.version = 2  # type: ignore[misc]


def test_equal_ids_hash_alike() -> None:
    """Ids with the same name and version are equal and usable as one dict key."""
    assert ServableId("m", 1) == ServableId("m", 1)
    assert len({ServableId("m", 1), ServableId("m", 1), ServableId("m", 2)}) == 2


def test_ordered_by_name_then_version() -> None:
    """Ids sort by name first, then numerically by version."""
    ids = [ServableId("b", 1), ServableId("a", 10), ServableId("a", 2), ServableId("a", 0)]

    assert sorted(ids) == [
        ServableId("a", 0),
        ServableId("a", 2),
        ServableId("a", 10),
        ServableId("b", 1),
    ]
    assert ServableId("a", 2) < ServableId("a", 10)


def test_str_is_tf_servings_format() -> None:
    """str renders as TF Serving's DebugString: {name: m version: 1}."""
    assert str(ServableId("mnist", 7)) == "{name: mnist version: 7}"
