"""Tests for servinglib.core.resource_tracker: reserving loaders' estimates against a limit."""

from __future__ import annotations

import attrs
import pytest

from servinglib.core.resource_tracker import ResourceStatistics, ResourceTracker
from servinglib.core.resources import (
    GPU_DEVICE,
    MAIN_DEVICE,
    PROCESSING_IN_MILLICORES,
    RAM_IN_BYTES,
    Resource,
    ResourceAllocation,
)
from servinglib.core.simple_loader import SimpleLoader
from servinglib.testing import FakeLoader

MAIN_RAM = Resource(MAIN_DEVICE, RAM_IN_BYTES)
MAIN_0_RAM = Resource(MAIN_DEVICE, RAM_IN_BYTES, 0)
MAIN_CPU = Resource(MAIN_DEVICE, PROCESSING_IN_MILLICORES)
GPU_RAM = Resource(GPU_DEVICE, RAM_IN_BYTES)
GPU_0_RAM = Resource(GPU_DEVICE, RAM_IN_BYTES, 0)
GPU_1_RAM = Resource(GPU_DEVICE, RAM_IN_BYTES, 1)


def needs(quantities: dict[Resource, int]) -> FakeLoader:
    """A loader estimating ``quantities``."""
    return FakeLoader(resource_estimate=ResourceAllocation(quantities))


def ram(quantity: int) -> ResourceAllocation:
    return ResourceAllocation.ram_bytes(quantity)


def test_new_tracker_has_limit_and_nothing_used() -> None:
    """A new tracker reports its limit, nothing used and no refusals."""
    tracker = ResourceTracker(ram(100))

    assert tracker.total == ram(100)
    assert tracker.used == ResourceAllocation.empty()
    assert tracker.statistics() == ResourceStatistics(ram(100), ResourceAllocation.empty(), 0)


def test_reserve_within_limit_adds_the_estimate() -> None:
    """A reservation that fits succeeds and adds the loader's estimate to what is used."""
    tracker = ResourceTracker(ram(100))

    assert tracker.reserve(FakeLoader(resource_estimate=ram(30)))
    assert tracker.reserve(SimpleLoader(lambda: "s", ram(20)))

    assert tracker.used == ram(50)


def test_reserve_up_to_exactly_the_limit_fits() -> None:
    """Reserving exactly what is left succeeds: the limit is inclusive."""
    tracker = ResourceTracker(ram(100))
    assert tracker.reserve(FakeLoader(resource_estimate=ram(60)))

    assert tracker.reserve(FakeLoader(resource_estimate=ram(40)))

    assert tracker.used == ram(100)


def test_reserve_over_limit_is_refused_and_reserves_nothing() -> None:
    """A reservation that would exceed the limit returns False and leaves what is used unchanged."""
    tracker = ResourceTracker(ram(100))
    assert tracker.reserve(FakeLoader(resource_estimate=ram(70)))

    assert not tracker.reserve(FakeLoader(resource_estimate=ram(31)))

    assert tracker.used == ram(70)
    assert tracker.reserve(FakeLoader(resource_estimate=ram(30)))
    assert tracker.used == ram(100)


def test_estimate_larger_than_the_limit_is_refused_on_an_empty_tracker() -> None:
    """A loader that needs more than the whole limit never fits."""
    tracker = ResourceTracker(ram(100))

    assert not tracker.reserve(FakeLoader(resource_estimate=ram(101)))
    assert tracker.used == ResourceAllocation.empty()


def test_resource_without_a_limit_is_refused() -> None:
    """A loader needing a resource the limit does not name has no room for it."""
    tracker = ResourceTracker(ram(100))

    assert not tracker.reserve(needs({MAIN_CPU: 1}))
    assert not tracker.reserve(needs({GPU_RAM: 1}))


def test_empty_estimate_always_fits() -> None:
    """A loader estimating nothing fits even when the limit is used up."""
    tracker = ResourceTracker(ram(100))
    assert tracker.reserve(FakeLoader(resource_estimate=ram(100)))

    assert tracker.reserve(FakeLoader())
    assert tracker.reserve(SimpleLoader(lambda: "s"))
    assert tracker.used == ram(100)


def test_statistics_count_refused_reservations() -> None:
    """statistics() reports the limit, what is used and how many reservations were refused."""
    tracker = ResourceTracker(ram(100))
    tracker.reserve(FakeLoader(resource_estimate=ram(80)))
    tracker.reserve(FakeLoader(resource_estimate=ram(30)))
    tracker.reserve(FakeLoader(resource_estimate=ram(21)))
    tracker.reserve(FakeLoader(resource_estimate=ram(20)))

    assert tracker.statistics() == ResourceStatistics(
        total=ram(100), used=ram(100), refused_reservations=2
    )


def test_statistics_are_an_immutable_snapshot() -> None:
    """A statistics snapshot is frozen and does not change with later reservations."""
    tracker = ResourceTracker(ram(100))
    before = tracker.statistics()

    tracker.reserve(FakeLoader(resource_estimate=ram(50)))
    tracker.reserve(FakeLoader(resource_estimate=ram(60)))

    assert before == ResourceStatistics(ram(100), ResourceAllocation.empty(), 0)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        before.refused_reservations = 5  # type: ignore[misc]


def test_recompute_sets_used_to_the_sum_of_the_loaders_estimates() -> None:
    """recompute_used_resources makes what is used the sum of the given loaders' estimates."""
    tracker = ResourceTracker(ram(1000))
    tracker.reserve(FakeLoader(resource_estimate=ram(900)))

    tracker.recompute_used_resources(
        [
            FakeLoader(resource_estimate=ram(100)),
            SimpleLoader(lambda: "s", ram(50)),
            SimpleLoader(lambda: "t", lambda: ram(25)),
            FakeLoader(),
        ]
    )

    assert tracker.used == ram(175)


def test_recompute_with_no_loaders_frees_everything() -> None:
    """Recomputing from no loaders leaves nothing used."""
    tracker = ResourceTracker(ram(100))
    tracker.reserve(FakeLoader(resource_estimate=ram(100)))

    tracker.recompute_used_resources([])

    assert tracker.used == ResourceAllocation.empty()


def test_recompute_reads_current_estimates() -> None:
    """Recomputing asks each loader again, so an estimate that shrank after load frees room."""
    estimate = {"bytes": 80}
    loader = SimpleLoader(lambda: "s", lambda: ram(estimate["bytes"]))
    tracker = ResourceTracker(ram(100))
    assert tracker.reserve(loader)
    assert not tracker.reserve(FakeLoader(resource_estimate=ram(50)))

    estimate["bytes"] = 40  # the loaded servable turned out smaller than estimated
    tracker.recompute_used_resources([loader])

    assert tracker.used == ram(40)
    assert tracker.reserve(FakeLoader(resource_estimate=ram(50)))


def test_recompute_keeps_the_refusal_count() -> None:
    """Recomputing what is used does not reset the count of refused reservations."""
    tracker = ResourceTracker(ram(10))
    tracker.reserve(FakeLoader(resource_estimate=ram(11)))

    tracker.recompute_used_resources([])

    assert tracker.statistics().refused_reservations == 1


def test_recompute_then_reserve_as_the_manager_does() -> None:
    """After a holder unloads, recomputing from the remaining holders makes room for a new load."""
    old, kept = FakeLoader(resource_estimate=ram(60)), FakeLoader(resource_estimate=ram(30))
    new = FakeLoader(resource_estimate=ram(60))
    tracker = ResourceTracker(ram(100))
    tracker.recompute_used_resources([old, kept])
    assert not tracker.reserve(new)

    tracker.recompute_used_resources([kept])

    assert tracker.reserve(new)
    assert tracker.used == ram(90)


# -- bound and unbound resources ------------------------------------------------------------


def test_unbound_estimate_fits_any_one_instance_with_room() -> None:
    """An unbound need fits when one bound instance of the device has room for all of it."""
    tracker = ResourceTracker(ResourceAllocation({GPU_0_RAM: 50, GPU_1_RAM: 90}))

    assert tracker.reserve(needs({GPU_RAM: 80}))


def test_unbound_estimate_is_not_split_across_instances() -> None:
    """An unbound need that no single instance can hold is refused, though the sum would fit."""
    tracker = ResourceTracker(ResourceAllocation({GPU_0_RAM: 50, GPU_1_RAM: 50}))

    assert not tracker.reserve(needs({GPU_RAM: 80}))
    assert tracker.statistics().refused_reservations == 1


def test_bound_estimate_needs_room_on_its_own_instance() -> None:
    """A need bound to instance 1 is refused when only instance 0 has room, and fits on 0."""
    tracker = ResourceTracker(ResourceAllocation({GPU_0_RAM: 100}))

    assert not tracker.reserve(needs({GPU_1_RAM: 10}))
    assert tracker.reserve(needs({GPU_0_RAM: 100}))


def test_bound_estimate_fits_an_unbound_limit() -> None:
    """An unbound limit stands for every instance: a need bound to main:0 fits it."""
    tracker = ResourceTracker(ram(100))

    assert tracker.reserve(needs({MAIN_0_RAM: 60}))
    assert tracker.used == ResourceAllocation({MAIN_0_RAM: 60})
    assert not tracker.reserve(needs({MAIN_0_RAM: 41}))


def test_unbound_limit_gives_each_instance_its_capacity() -> None:
    """An unbound limit on a multi-instance device is the capacity of every instance."""
    tracker = ResourceTracker(ResourceAllocation({GPU_RAM: 100}))

    assert tracker.reserve(needs({GPU_0_RAM: 80}))
    assert tracker.reserve(needs({GPU_1_RAM: 80}))
    assert not tracker.reserve(needs({GPU_0_RAM: 21}))


def test_unbound_reservations_add_up_conservatively() -> None:
    """Unbound reservations are summed against one instance, as TF Serving's overbinding does.

    Two unbound needs of 60 on two GPUs of 100 could land on different GPUs,
    but nothing records where, so the second is refused rather than risk both
    landing on one.
    """
    tracker = ResourceTracker(ResourceAllocation({GPU_0_RAM: 100, GPU_1_RAM: 100}))

    assert tracker.reserve(needs({GPU_RAM: 60}))
    assert not tracker.reserve(needs({GPU_RAM: 60}))


def test_bound_and_unbound_needs_on_one_instance_add_up() -> None:
    """Unbound and bound needs on the single main instance together may not exceed its limit."""
    tracker = ResourceTracker(ram(100))
    assert tracker.reserve(needs({MAIN_RAM: 80}))

    assert not tracker.reserve(needs({MAIN_0_RAM: 50}))


def test_unbound_need_does_not_fit_instances_filled_by_bound_needs() -> None:
    """An unbound need is refused when bound reservations left no instance enough room."""
    tracker = ResourceTracker(ResourceAllocation({GPU_0_RAM: 100, GPU_1_RAM: 100}))
    assert tracker.reserve(needs({GPU_0_RAM: 80}))
    assert tracker.reserve(needs({GPU_1_RAM: 80}))

    assert not tracker.reserve(needs({GPU_RAM: 80}))
