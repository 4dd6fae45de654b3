"""Tests for servinglib.sources.version_policy: selection tables, validation, and properties."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from servinglib.errors import InvalidArgumentError
from servinglib.sources.version_policy import ServableVersionPolicy, VersionPolicyKind

Policy = ServableVersionPolicy


@pytest.mark.parametrize(
    ("policy", "available", "selected"),
    [
        (Policy(), [1, 5, 3, 9], [9]),
        (Policy.latest(), [1, 5, 3, 9], [9]),
        (Policy.latest(3), [1, 5, 3, 9], [3, 5, 9]),
        (Policy.latest(10), [1, 5, 3, 9], [1, 3, 5, 9]),
        (Policy.latest(2), [4, 4, 2, 2], [2, 4]),
        (Policy.latest(), [0], [0]),
        (Policy.all(), [1, 5, 3, 9], [1, 3, 5, 9]),
        (Policy.all(), [3, 3, 1], [1, 3]),
        (Policy.specific([3, 9]), [1, 5, 3, 9], [3, 9]),
        (Policy.specific([3, 4, 10]), [1, 5, 3, 9], [3]),
        (Policy.specific([4, 10]), [1, 5, 3, 9], []),
        (Policy.specific([0]), [0, 1], [0]),
        (Policy.latest(), [], []),
        (Policy.latest(3), [], []),
        (Policy.all(), [], []),
        (Policy.specific([1]), [], []),
    ],
    ids=str,
)
def test_select(policy: ServableVersionPolicy, available: list[int], selected: list[int]) -> None:
    """select() picks the versions TF Serving's policy would aspire, ascending."""
    assert policy.select(available) == selected


def test_default_policy_is_latest_one() -> None:
    """A policy built with no arguments is latest(1), as TF Serving's default."""
    assert Policy() == Policy.latest(1)
    assert (Policy().kind, Policy().num_versions) == (VersionPolicyKind.LATEST, 1)


def test_select_accepts_any_iterable() -> None:
    """select() consumes a one-shot iterable such as a generator."""
    assert Policy.latest(2).select(v for v in (7, 1, 4)) == [4, 7]


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Policy.latest(0), "num_versions >= 1, got 0"),
        (lambda: Policy.latest(-2), "num_versions >= 1, got -2"),
        (lambda: Policy.specific([]), "at least one version"),
        (lambda: Policy.specific([3, -1]), "versions must be >= 0"),
        (lambda: Policy(VersionPolicyKind.LATEST, num_versions=0), "num_versions >= 1"),
    ],
    ids=["latest-0", "latest-negative", "specific-empty", "specific-negative", "constructor"],
)
def test_invalid_policies_are_rejected(
    build: Callable[[], ServableVersionPolicy], message: str
) -> None:
    """Policies that could never aspire anything sensible raise InvalidArgumentError."""
    with pytest.raises(InvalidArgumentError, match=message):
        build()


@pytest.mark.parametrize(
    ("policy", "text"),
    [
        (Policy(), "latest(1)"),
        (Policy.latest(3), "latest(3)"),
        (Policy.all(), "all"),
        (Policy.specific([9, 3, 3]), "specific(3, 9)"),
    ],
)
def test_str(policy: ServableVersionPolicy, text: str) -> None:
    """str() names the policy and its argument, specific versions sorted."""
    assert str(policy) == text


def test_policies_are_immutable_values() -> None:
    """Equal arguments make equal, hashable policies; fields cannot be reassigned."""
    assert Policy.specific([1, 2]) == Policy.specific([2, 1, 2])
    assert len({Policy.all(), Policy.all(), Policy.latest(1), Policy()}) == 2
    policy = Policy.latest(2)
    with pytest.raises(AttributeError):
        policy.num_versions = 5  # type: ignore[misc]


# -- properties ---------------------------------------------------------------

versions = st.integers(min_value=0, max_value=40)
available_versions = st.lists(versions, max_size=30)
latest_policies = st.builds(Policy.latest, st.integers(min_value=1, max_value=40))
specific_policies = st.builds(Policy.specific, st.frozensets(versions, min_size=1))
policies = st.one_of(latest_policies, st.just(Policy.all()), specific_policies)


@given(policies, available_versions)
def test_select_returns_a_sorted_duplicate_free_subset(
    policy: ServableVersionPolicy, available: list[int]
) -> None:
    """Whatever the policy, the selection is strictly ascending and drawn from the input."""
    selected = policy.select(available)
    assert selected == sorted(set(selected))
    assert set(selected) <= set(available)


@given(st.integers(min_value=1, max_value=40), available_versions)
def test_latest_returns_the_n_highest_distinct_versions(n: int, available: list[int]) -> None:
    """latest(n) returns min(n, number of distinct versions) versions, the highest ones."""
    selected = Policy.latest(n).select(available)
    distinct = set(available)
    assert len(selected) == min(n, len(distinct))
    assert all(v > w for v in selected for w in distinct - set(selected))


@given(st.frozensets(versions, min_size=1), available_versions)
def test_specific_returns_exactly_the_intersection(
    wanted: frozenset[int], available: list[int]
) -> None:
    """specific(S) returns S ∩ available, ascending."""
    assert Policy.specific(wanted).select(available) == sorted(wanted & set(available))


@given(available_versions)
def test_all_returns_the_distinct_input_sorted(available: list[int]) -> None:
    """all() returns every distinct available version, ascending."""
    assert Policy.all().select(available) == sorted(set(available))
