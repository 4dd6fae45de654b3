"""Tests for servinglib.core.servable_request."""

from __future__ import annotations

from servinglib.core.servable_id import ServableId
from servinglib.core.servable_request import AutoVersionPolicy, ServableRequest


def test_specific_names_one_version() -> None:
    """ServableRequest.specific asks for exactly that version."""
    request = ServableRequest.specific("m", 3)

    assert request.name == "m"
    assert request.version == 3


def test_latest_has_no_version_and_latest_policy() -> None:
    """ServableRequest.latest leaves the version open and picks the highest."""
    request = ServableRequest.latest("m")

    assert request.version is None
    assert request.auto_version_policy is AutoVersionPolicy.LATEST


def test_earliest_has_no_version_and_earliest_policy() -> None:
    """ServableRequest.earliest leaves the version open and picks the lowest."""
    request = ServableRequest.earliest("m")

    assert request.version is None
    assert request.auto_version_policy is AutoVersionPolicy.EARLIEST


def test_from_id_is_specific() -> None:
    """ServableRequest.from_id asks for exactly the id's version."""
    assert ServableRequest.from_id(ServableId("m", 5)) == ServableRequest.specific("m", 5)


def test_default_is_latest() -> None:
    """A request built with just a name means the latest version."""
    assert ServableRequest("m") == ServableRequest.latest("m")


def test_str_formats() -> None:
    """str renders as TF Serving's ServableRequest DebugString forms."""
    assert str(ServableRequest.specific("m", 2)) == "Specific(m, 2)"
    assert str(ServableRequest.latest("m")) == "Latest(m)"
    assert str(ServableRequest.earliest("m")) == "Earliest(m)"


def test_requests_compare_by_value() -> None:
    """Equal requests are equal and hash alike; latest and earliest differ."""
    assert ServableRequest.specific("m", 1) == ServableRequest.specific("m", 1)
    assert hash(ServableRequest.latest("m")) == hash(ServableRequest.latest("m"))
    assert ServableRequest.latest("m") != ServableRequest.earliest("m")
