"""Tests for servinglib.core.resources: allocation arithmetic and containment."""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from servinglib.core.resources import (
    GPU_DEVICE,
    MAIN_DEVICE,
    PROCESSING_IN_MILLICORES,
    RAM_IN_BYTES,
    Resource,
    ResourceAllocation,
)

MAIN_RAM = Resource(MAIN_DEVICE, RAM_IN_BYTES)
MAIN_0_RAM = Resource(MAIN_DEVICE, RAM_IN_BYTES, 0)
MAIN_CPU = Resource(MAIN_DEVICE, PROCESSING_IN_MILLICORES)
GPU_RAM = Resource(GPU_DEVICE, RAM_IN_BYTES)
GPU_0_RAM = Resource(GPU_DEVICE, RAM_IN_BYTES, 0)
GPU_1_RAM = Resource(GPU_DEVICE, RAM_IN_BYTES, 1)


def alloc(**by_name: int) -> ResourceAllocation:
    """An allocation from keyword quantities named after the module constants above."""
    return ResourceAllocation({NAMED[name]: quantity for name, quantity in by_name.items()})


NAMED = {
    "main_ram": MAIN_RAM,
    "main_0_ram": MAIN_0_RAM,
    "main_cpu": MAIN_CPU,
    "gpu_ram": GPU_RAM,
    "gpu_0_ram": GPU_0_RAM,
    "gpu_1_ram": GPU_1_RAM,
}

allocations = st.dictionaries(
    st.sampled_from(list(NAMED.values())), st.integers(min_value=0, max_value=10**12)
).map(ResourceAllocation)


def _mixes_bound_and_unbound_gpu(allocation: ResourceAllocation) -> bool:
    return GPU_RAM in allocation.quantities and (
        GPU_0_RAM in allocation.quantities or GPU_1_RAM in allocation.quantities
    )


# On a multi-instance device an unbound need means "one instance, not said
# which", while an unbound limit means "each instance": mixing both in one
# allocation is not reflexive, so the containment properties leave it out.
unmixed_allocations = allocations.filter(lambda a: not _mixes_bound_and_unbound_gpu(a))


def test_ram_bytes_is_unbound_main_ram() -> None:
    """ResourceAllocation.ram_bytes is that many bytes of unbound RAM on the main device."""
    assert ResourceAllocation.ram_bytes(100) == alloc(main_ram=100)
    assert ResourceAllocation.ram_bytes(5, GPU_DEVICE) == alloc(gpu_ram=5)


def test_quantity_of_absent_resource_is_zero() -> None:
    """quantity() is 0 for a resource the allocation does not mention."""
    assert alloc(main_ram=10).quantity(GPU_RAM) == 0
    assert alloc(main_ram=10).quantity(MAIN_0_RAM) == 0


def test_zero_quantities_are_dropped() -> None:
    """Zero quantities vanish, so an all-zero allocation equals the empty one and is falsy."""
    zeros = alloc(main_ram=0, gpu_ram=0)

    assert zeros == ResourceAllocation.empty()
    assert not zeros
    assert alloc(main_ram=0, gpu_ram=3) == alloc(gpu_ram=3)


def test_negative_quantity_is_rejected() -> None:
    """A negative quantity raises ValueError."""
    with pytest.raises(ValueError, match=">= 0"):
        alloc(main_ram=-1)


def test_bool_quantity_is_rejected() -> None:
    """A bool is not a quantity."""
    with pytest.raises(ValueError, match="int"):
        ResourceAllocation({MAIN_RAM: True})


def test_non_resource_key_is_rejected() -> None:
    """Keys must be Resource objects."""
    with pytest.raises(TypeError, match="Resource"):
        ResourceAllocation({"main/ram_in_bytes": 1})  # type: ignore[dict-item]


def test_add_sums_same_resources_and_keeps_others() -> None:
    """+ sums quantities of equal resources and keeps the rest; bound and unbound stay apart."""
    total = alloc(main_ram=10, gpu_0_ram=1) + alloc(main_ram=5, main_0_ram=7)

    assert total == alloc(main_ram=15, main_0_ram=7, gpu_0_ram=1)


def test_subtract_removes_quantities_and_drops_zeros() -> None:
    """- subtracts per resource, and a resource brought to zero disappears."""
    rest = alloc(main_ram=10, gpu_ram=4) - alloc(main_ram=10, gpu_ram=1)

    assert rest == alloc(gpu_ram=3)
    assert MAIN_RAM not in rest.quantities


def test_subtract_below_zero_raises() -> None:
    """Subtracting more than is held raises ValueError."""
    with pytest.raises(ValueError, match="cannot subtract"):
        _ = alloc(main_ram=10) - alloc(main_ram=11)


def test_subtract_of_absent_resource_raises() -> None:
    """Subtracting a resource that is not held at all raises ValueError."""
    with pytest.raises(ValueError, match="cannot subtract"):
        _ = alloc(main_ram=10) - alloc(gpu_ram=1)


def test_subtract_bound_from_unbound_raises() -> None:
    """Bound and unbound resources are distinct keys: one cannot pay for the other in -."""
    with pytest.raises(ValueError, match="cannot subtract"):
        _ = alloc(main_ram=10) - alloc(main_0_ram=1)


def test_iteration_and_str_are_sorted() -> None:
    """Iteration yields (resource, quantity) pairs sorted by resource; str lists them."""
    allocation = alloc(main_ram=2, gpu_0_ram=1)

    assert list(allocation) == [(GPU_0_RAM, 1), (MAIN_RAM, 2)]
    assert str(allocation) == "{gpu:0/ram_in_bytes: 1, main/ram_in_bytes: 2}"
    assert str(ResourceAllocation.empty()) == "{}"


def test_unbound_sorts_before_bound_instances() -> None:
    """Resources order by device and kind, the unbound one before instances 0, 1, ..."""
    assert sorted([GPU_1_RAM, GPU_RAM, GPU_0_RAM, MAIN_0_RAM, MAIN_RAM]) == [
        GPU_RAM,
        GPU_0_RAM,
        GPU_1_RAM,
        MAIN_RAM,
        MAIN_0_RAM,
    ]


def test_str_of_bound_and_unbound_together() -> None:
    """An allocation holding a resource both bound and unbound still iterates and prints."""
    allocation = alloc(main_ram=50, main_0_ram=20)

    assert list(allocation) == [(MAIN_RAM, 50), (MAIN_0_RAM, 20)]
    assert str(allocation) == "{main/ram_in_bytes: 50, main:0/ram_in_bytes: 20}"


@pytest.mark.parametrize(
    ("limit", "wanted", "fits"),
    [
        pytest.param(alloc(main_ram=100), alloc(main_ram=100), True, id="unbound-exact"),
        pytest.param(alloc(main_ram=100), alloc(main_ram=101), False, id="unbound-over"),
        pytest.param(alloc(main_ram=100), alloc(gpu_ram=1), False, id="other-device"),
        pytest.param(alloc(main_ram=100), alloc(main_cpu=1), False, id="other-kind"),
        pytest.param(alloc(main_ram=100), alloc(main_0_ram=60), True, id="bound-in-unbound"),
        pytest.param(alloc(main_ram=50), alloc(main_0_ram=60), False, id="bound-over-unbound"),
        pytest.param(alloc(gpu_0_ram=100), alloc(gpu_ram=80), True, id="unbound-in-instance"),
        pytest.param(alloc(gpu_0_ram=50, gpu_1_ram=50), alloc(gpu_ram=80), False, id="no-split"),
        pytest.param(alloc(gpu_0_ram=50, gpu_1_ram=90), alloc(gpu_ram=80), True, id="any-inst"),
        pytest.param(alloc(gpu_0_ram=100), alloc(gpu_1_ram=50), False, id="other-instance"),
        pytest.param(alloc(gpu_0_ram=100), alloc(gpu_0_ram=100), True, id="same-instance"),
        pytest.param(alloc(main_ram=1), ResourceAllocation.empty(), True, id="empty-fits"),
        pytest.param(ResourceAllocation.empty(), alloc(main_ram=1), False, id="empty-limit"),
        pytest.param(
            alloc(main_ram=80), alloc(main_ram=50, main_0_ram=50), False, id="main-is-one-instance"
        ),
        pytest.param(alloc(main_0_ram=100), alloc(main_ram=100), True, id="main-unbound-is-0"),
        pytest.param(
            alloc(gpu_ram=100), alloc(gpu_ram=50, gpu_0_ram=60), False, id="unbound-on-named"
        ),
    ],
)
def test_contains_bound_and_unbound(
    limit: ResourceAllocation, wanted: ResourceAllocation, fits: bool
) -> None:
    """A bound need fits its instance or the unbound pool; an unbound one, any one instance."""
    assert limit.contains(wanted) is fits


@given(allocations, allocations)
def test_add_then_subtract_is_identity(a: ResourceAllocation, b: ResourceAllocation) -> None:
    """(a + b) - b == a for any allocations."""
    assert (a + b) - b == a


@given(unmixed_allocations)
def test_contains_itself(a: ResourceAllocation) -> None:
    """Every allocation contains itself."""
    assert a.contains(a)


@given(unmixed_allocations, unmixed_allocations)
def test_sum_contains_each_part(a: ResourceAllocation, b: ResourceAllocation) -> None:
    """a + b contains a (and b) when the sum mixes no bound and unbound GPU resources."""
    assume(not _mixes_bound_and_unbound_gpu(a + b))
    assert (a + b).contains(a)
    assert (a + b).contains(b)


@given(allocations)
def test_iteration_lists_every_quantity(a: ResourceAllocation) -> None:
    """Iterating any allocation yields each of its resources once, with its quantity."""
    assert dict(list(a)) == dict(a.quantities)
    assert str(a).count(": ") == len(a.quantities)


@given(allocations, allocations)
def test_addition_commutes(a: ResourceAllocation, b: ResourceAllocation) -> None:
    """a + b == b + a."""
    assert a + b == b + a
