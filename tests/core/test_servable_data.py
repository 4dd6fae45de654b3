"""Tests for servinglib.core.servable_data."""

from __future__ import annotations

import pytest

from servinglib.core.servable_data import ServableData
from servinglib.core.servable_id import ServableId
from servinglib.errors import NotFoundError, UnavailableError

ID = ServableId("m", 1)


def test_of_holds_data() -> None:
    """ServableData.of carries the data, no error, and is ok."""
    item = ServableData.of(ID, "/models/m/1")

    assert item.id == ID
    assert item.data == "/models/m/1"
    assert item.error is None
    assert item.ok


def test_failed_holds_the_error() -> None:
    """ServableData.failed carries the error and is not ok."""
    error = NotFoundError("no such path")

    item: ServableData[str] = ServableData.failed(ID, error)

    assert item.error is error
    assert not item.ok


def test_data_raises_the_held_error() -> None:
    """Reading data of an errored item raises the held error itself."""
    error = NotFoundError("no such path")
    item: ServableData[str] = ServableData.failed(ID, error)

    with pytest.raises(NotFoundError) as raised:
        _ = item.data

    assert raised.value is error


def test_data_and_error_together_are_rejected() -> None:
    """An item holding both data and an error is refused."""
    with pytest.raises(ValueError, match="not both"):
        ServableData(ID, data="/models/m/1", error=NotFoundError("gone"))


def test_with_data_keeps_the_id() -> None:
    """with_data returns an item of the same id carrying the new data."""
    adapted = ServableData.of(ID, "/models/m/1").with_data(42)

    assert adapted == ServableData.of(ID, 42)
    assert adapted.data == 42


def test_with_error_keeps_the_id_and_drops_the_data() -> None:
    """with_error returns an item of the same id carrying only the error."""
    error = UnavailableError("adapter failed")

    adapted: ServableData[int] = ServableData.of(ID, "/models/m/1").with_error(error)

    assert adapted.id == ID
    assert adapted.error is error
    assert not adapted.ok


def test_compares_by_value() -> None:
    """Items with equal id and data (or error) are equal."""
    assert ServableData.of(ID, "p") == ServableData.of(ID, "p")
    assert ServableData.of(ID, "p") != ServableData.of(ServableId("m", 2), "p")
    assert ServableData.failed(ID, NotFoundError("x")) == ServableData.failed(
        ID, NotFoundError("x")
    )
