"""Tests for the aspired-version policies: TF Serving's rules, as tables and as properties."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servinglib.core.aspired_version_policy import (
    Action,
    AspiredServableStateSnapshot,
    AspiredVersionPolicy,
    ServableAction,
)
from servinglib.core.availability_preserving_policy import AvailabilityPreservingPolicy
from servinglib.core.loader_harness import HarnessState
from servinglib.core.resource_preserving_policy import ResourcePreservingPolicy
from servinglib.core.servable_id import ServableId

S = HarnessState
NAME = "m"
FINISHED = {S.DISABLED, S.ERROR}
AVAILABILITY = AvailabilityPreservingPolicy()
RESOURCE = ResourcePreservingPolicy()


def aspired(version: int, state: HarnessState) -> AspiredServableStateSnapshot:
    """A snapshot of an aspired version."""
    return AspiredServableStateSnapshot(ServableId(NAME, version), state, is_aspired=True)


def unaspired(version: int, state: HarnessState) -> AspiredServableStateSnapshot:
    """A snapshot of a version no longer aspired."""
    return AspiredServableStateSnapshot(ServableId(NAME, version), state, is_aspired=False)


def load(version: int) -> ServableAction:
    return ServableAction(Action.LOAD, ServableId(NAME, version))


def unload(version: int) -> ServableAction:
    return ServableAction(Action.UNLOAD, ServableId(NAME, version))


Case = tuple[list[AspiredServableStateSnapshot], ServableAction | None]

AVAILABILITY_CASES: dict[str, Case] = {
    "nothing at all": ([], None),
    "nothing to do": ([aspired(1, S.READY), aspired(2, S.READY)], None),
    "only errors": ([aspired(1, S.ERROR), unaspired(2, S.ERROR)], None),
    "nothing aspired: unload": ([unaspired(1, S.READY)], unload(1)),
    "nothing aspired: lowest first": ([unaspired(2, S.READY), unaspired(1, S.READY)], unload(1)),
    "aspired ready: unload the old": ([unaspired(1, S.READY), aspired(2, S.READY)], unload(1)),
    "two old ready: unload lowest": (
        [unaspired(3, S.READY), unaspired(1, S.READY), aspired(4, S.NEW)],
        unload(1),
    ),
    "last old ready: load new first": ([unaspired(1, S.READY), aspired(2, S.NEW)], load(2)),
    "last old ready: keep while loading": ([unaspired(1, S.READY), aspired(2, S.LOADING)], None),
    "last old ready: keep if new failed": ([unaspired(1, S.READY), aspired(2, S.ERROR)], None),
    "new failed, newer to load": (
        [unaspired(1, S.READY), aspired(2, S.ERROR), aspired(3, S.NEW)],
        load(3),
    ),
    "multiple aspired new: highest first": (
        [aspired(1, S.NEW), aspired(3, S.NEW), aspired(2, S.NEW)],
        load(3),
    ),
    "next aspired new after the highest": (
        [aspired(1, S.NEW), aspired(3, S.LOADING), aspired(2, S.NEW)],
        load(2),
    ),
    "un-aspired new is not loaded": ([unaspired(5, S.NEW), aspired(1, S.NEW)], load(1)),
    "old still unloading: load anyway": ([unaspired(1, S.QUIESCING), aspired(2, S.NEW)], load(2)),
}

RESOURCE_CASES: dict[str, Case] = {
    "nothing at all": ([], None),
    "nothing to do": ([aspired(1, S.READY), aspired(2, S.READY)], None),
    "only errors": ([aspired(1, S.ERROR), unaspired(2, S.ERROR)], None),
    "nothing aspired: unload": ([unaspired(1, S.READY)], unload(1)),
    "unload the first un-aspired ready": (
        [unaspired(2, S.READY), unaspired(1, S.READY), aspired(3, S.NEW)],
        unload(2),
    ),
    "unload before load": ([unaspired(1, S.READY), aspired(2, S.NEW)], unload(1)),
    "unload while an aspired serves": ([aspired(2, S.READY), unaspired(1, S.READY)], unload(1)),
    "wait while old unload requested": (
        [unaspired(1, S.UNLOAD_REQUESTED), aspired(2, S.NEW)],
        None,
    ),
    "wait while old quiescing": ([unaspired(1, S.QUIESCING), aspired(2, S.NEW)], None),
    "wait while old unloading": ([unaspired(1, S.UNLOADING), aspired(2, S.NEW)], None),
    "wait while old still loading": ([unaspired(1, S.LOADING), aspired(2, S.NEW)], None),
    "load once old disabled": ([unaspired(1, S.DISABLED), aspired(2, S.NEW)], load(2)),
    "load once old errored": ([unaspired(1, S.ERROR), aspired(2, S.NEW)], load(2)),
    "multiple aspired new: highest first": (
        [aspired(1, S.NEW), aspired(3, S.NEW), aspired(2, S.NEW)],
        load(3),
    ),
    "aspired loading does not block": ([aspired(3, S.LOADING), aspired(2, S.NEW)], load(2)),
}


@pytest.mark.parametrize(
    ("versions", "expected"), AVAILABILITY_CASES.values(), ids=list(AVAILABILITY_CASES)
)
def test_availability_preserving_rules(
    versions: list[AspiredServableStateSnapshot], expected: ServableAction | None
) -> None:
    """AvailabilityPreservingPolicy picks TF Serving's next action for each snapshot."""
    assert AVAILABILITY.next_action(versions) == expected


@pytest.mark.parametrize(
    ("versions", "expected"), RESOURCE_CASES.values(), ids=list(RESOURCE_CASES)
)
def test_resource_preserving_rules(
    versions: list[AspiredServableStateSnapshot], expected: ServableAction | None
) -> None:
    """ResourcePreservingPolicy picks TF Serving's next action for each snapshot."""
    assert RESOURCE.next_action(versions) == expected


def test_availability_preserving_swap_step_by_step() -> None:
    """Swapping 1 → 2 loads 2 while 1 serves, and unloads 1 only once 2 is READY."""
    steps: list[Case] = [
        ([aspired(1, S.READY)], None),
        ([unaspired(1, S.READY), aspired(2, S.NEW)], load(2)),
        ([unaspired(1, S.READY), aspired(2, S.LOAD_REQUESTED)], None),
        ([unaspired(1, S.READY), aspired(2, S.LOADING)], None),
        ([unaspired(1, S.READY), aspired(2, S.READY)], unload(1)),
        ([unaspired(1, S.QUIESCING), aspired(2, S.READY)], None),
        ([unaspired(1, S.DISABLED), aspired(2, S.READY)], None),
    ]
    assert [AVAILABILITY.next_action(versions) for versions, _ in steps] == [
        expected for _, expected in steps
    ]


def test_resource_preserving_swap_step_by_step() -> None:
    """Swapping 1 → 2 unloads 1, waits until it is DISABLED, then loads 2."""
    steps: list[Case] = [
        ([aspired(1, S.READY)], None),
        ([unaspired(1, S.READY), aspired(2, S.NEW)], unload(1)),
        ([unaspired(1, S.UNLOAD_REQUESTED), aspired(2, S.NEW)], None),
        ([unaspired(1, S.QUIESCED), aspired(2, S.NEW)], None),
        ([unaspired(1, S.UNLOADING), aspired(2, S.NEW)], None),
        ([unaspired(1, S.DISABLED), aspired(2, S.NEW)], load(2)),
        ([unaspired(1, S.DISABLED), aspired(2, S.LOADING)], None),
        ([unaspired(1, S.DISABLED), aspired(2, S.READY)], None),
    ]
    assert [RESOURCE.next_action(versions) for versions, _ in steps] == [
        expected for _, expected in steps
    ]


def test_highest_aspired_new_version() -> None:
    """The helper finds the highest aspired NEW version, ignoring un-aspired and started ones."""
    versions = [aspired(1, S.NEW), aspired(4, S.LOADING), unaspired(9, S.NEW), aspired(3, S.NEW)]

    assert AspiredVersionPolicy.highest_aspired_new_version(versions) == ServableId(NAME, 3)
    assert AspiredVersionPolicy.highest_aspired_new_version([aspired(1, S.READY)]) is None


class LowestFirstPolicy(AspiredVersionPolicy):
    """Loads aspired versions from the lowest up, and never unloads."""

    def next_action(
        self, versions: Sequence[AspiredServableStateSnapshot]
    ) -> ServableAction | None:
        new = [v.id for v in versions if v.is_aspired and v.state is S.NEW]
        return ServableAction(Action.LOAD, min(new)) if new else None


def test_custom_policy_is_a_small_subclass() -> None:
    """A policy is one next_action method: here one that loads the lowest aspired NEW first."""
    policy = LowestFirstPolicy()

    assert policy.next_action([aspired(3, S.NEW), aspired(2, S.NEW), aspired(1, S.READY)]) == load(
        2
    )
    assert policy.next_action([aspired(1, S.READY)]) is None


@st.composite
def snapshots(draw: st.DrawFn) -> list[AspiredServableStateSnapshot]:
    """1 to 6 distinct versions of one name, each in a random state, aspired or not."""
    versions = draw(st.lists(st.integers(0, 20), min_size=1, max_size=6, unique=True))
    return [
        AspiredServableStateSnapshot(
            ServableId(NAME, version), draw(st.sampled_from(S)), is_aspired=draw(st.booleans())
        )
        for version in versions
    ]


POLICIES = pytest.mark.parametrize(
    "policy", [AVAILABILITY, RESOURCE], ids=["availability", "resource"]
)


def _target(
    versions: Sequence[AspiredServableStateSnapshot], action: ServableAction
) -> AspiredServableStateSnapshot:
    return next(v for v in versions if v.id == action.id)


@POLICIES
@given(versions=snapshots())
def test_action_names_a_version_of_the_snapshot(
    policy: AspiredVersionPolicy, versions: list[AspiredServableStateSnapshot]
) -> None:
    """An action always names one of the versions in the snapshot."""
    action = policy.next_action(versions)

    assert action is None or action.id in {v.id for v in versions}


@POLICIES
@given(versions=snapshots())
def test_load_targets_the_highest_aspired_new_version(
    policy: AspiredVersionPolicy, versions: list[AspiredServableStateSnapshot]
) -> None:
    """A LOAD always targets an aspired NEW version, the highest such."""
    action = policy.next_action(versions)

    if action is not None and action.action is Action.LOAD:
        target = _target(versions, action)
        assert target.is_aspired
        assert target.state is S.NEW
        assert action.id.version == max(
            v.id.version for v in versions if v.is_aspired and v.state is S.NEW
        )


@POLICIES
@given(versions=snapshots())
def test_unload_targets_an_unaspired_ready_version(
    policy: AspiredVersionPolicy, versions: list[AspiredServableStateSnapshot]
) -> None:
    """An UNLOAD always targets a version that is READY and no longer aspired."""
    action = policy.next_action(versions)

    if action is not None and action.action is Action.UNLOAD:
        target = _target(versions, action)
        assert not target.is_aspired
        assert target.state is S.READY


@given(versions=snapshots())
def test_availability_never_unloads_the_last_ready_version(
    versions: list[AspiredServableStateSnapshot],
) -> None:
    """Availability-preserving never leaves zero READY versions while something is aspired."""
    action = AVAILABILITY.next_action(versions)

    if (
        action is not None
        and action.action is Action.UNLOAD
        and any(v.is_aspired for v in versions)
    ):
        still_ready = [v for v in versions if v.state is S.READY and v.id != action.id]
        assert still_ready


@given(versions=snapshots())
def test_availability_always_acts_on_an_aspired_new_version(
    versions: list[AspiredServableStateSnapshot],
) -> None:
    """Availability-preserving never stalls: with an aspired NEW version it always acts."""
    if AspiredVersionPolicy.highest_aspired_new_version(versions) is not None:
        assert AVAILABILITY.next_action(versions) is not None


@given(versions=snapshots(), data=st.data())
def test_availability_ignores_snapshot_order(
    versions: list[AspiredServableStateSnapshot], data: st.DataObject
) -> None:
    """Availability-preserving picks by version number, so the snapshot's order does not matter."""
    shuffled = data.draw(st.permutations(versions))

    assert AVAILABILITY.next_action(shuffled) == AVAILABILITY.next_action(versions)


@given(versions=snapshots())
def test_resource_never_loads_while_an_old_version_holds_resources(
    versions: list[AspiredServableStateSnapshot],
) -> None:
    """Resource-preserving never loads while an un-aspired version is READY or still unloading."""
    action = RESOURCE.next_action(versions)

    if action is not None and action.action is Action.LOAD:
        assert all(v.state in FINISHED for v in versions if not v.is_aspired)


@given(versions=snapshots())
def test_resource_loads_once_old_versions_are_finished(
    versions: list[AspiredServableStateSnapshot],
) -> None:
    """Resource-preserving loads as soon as every un-aspired version is DISABLED or in ERROR."""
    highest_new = AspiredVersionPolicy.highest_aspired_new_version(versions)
    if highest_new is not None and all(v.state in FINISHED for v in versions if not v.is_aspired):
        assert RESOURCE.next_action(versions) == ServableAction(Action.LOAD, highest_new)
