"""Tests for static_manager: a ready manager serving given objects as they are."""

from __future__ import annotations

import pytest

from servinglib.core.event_bus import EventBus
from servinglib.core.servable_id import ServableId
from servinglib.core.servable_request import ServableRequest
from servinglib.core.servable_state import ManagerState, ServableState
from servinglib.errors import NotFoundError
from servinglib.testing import static_manager


def test_serves_each_object_at_its_name_and_version() -> None:
    """Handles hold the very objects given; latest picks the highest version."""
    vocab_v1, vocab_v2, table = {"a": 0}, {"a": 1}, object()

    with static_manager({"vocab": {1: vocab_v1, 2: vocab_v2}, "table": {5: table}}) as manager:
        with manager.servable_handle(ServableRequest.specific("vocab", 1)) as handle:
            assert handle.servable is vocab_v1
        with manager.servable_handle(ServableRequest.latest("vocab")) as handle:
            assert handle.servable is vocab_v2
        with manager.servable_handle(ServableRequest.latest("table")) as handle:
            assert handle.servable is table
        assert sorted(manager.list_available_servable_ids()) == [
            ServableId("table", 5),
            ServableId("vocab", 1),
            ServableId("vocab", 2),
        ]


def test_takes_servable_ids_as_keys_and_gives_real_errors() -> None:
    """ServableId → object works too; an unknown name is the manager's NotFoundError."""
    with static_manager({ServableId("m", 3): "three", ServableId("m", 4): None}) as manager:
        with manager.servable_handle(ServableRequest.specific("m", 4)) as handle:
            assert handle.servable is None  # served as is, even None
        with pytest.raises(NotFoundError):
            manager.servable_handle(ServableRequest.latest("other"))


def test_publishes_on_the_given_bus_and_unloads_on_exit() -> None:
    """Lifecycle events go to event_bus; leaving the block unloads every version."""
    bus: EventBus[ServableState] = EventBus()
    seen: list[ManagerState] = []
    bus.subscribe(lambda state: seen.append(state.manager_state))

    with static_manager({"m": {1: "one"}}, event_bus=bus) as manager:
        assert seen[-1] is ManagerState.AVAILABLE

    assert seen == [
        ManagerState.START,
        ManagerState.LOADING,
        ManagerState.AVAILABLE,
        ManagerState.UNLOADING,
        ManagerState.END,
    ]
    assert manager.list_available_servable_ids() == []


def test_rejects_a_mapping_of_the_wrong_shape() -> None:
    """A name mapped straight to an object (not {version: object}) is a TypeError."""
    servables = {"m": "not a mapping of versions"}
    with (
        pytest.raises(TypeError, match=r"name → \{version: object\}"),
        static_manager(servables),  # type: ignore[arg-type]
    ):
        pass
