"""Resources a loader needs (device, instance, kind) and allocations of them."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import final

import attrs

MAIN_DEVICE = "main"
"""The host (CPU and its RAM): TF Serving's ``device_types::kMain``."""
GPU_DEVICE = "gpu"
SINGLE_INSTANCE_DEVICES = frozenset({MAIN_DEVICE})
"""Devices with exactly one instance: an unbound resource on them means instance 0."""
RAM_IN_BYTES = "ram_in_bytes"
"""Kind: bytes of memory on a device (TF Serving's ``resource_kinds::kRamBytes``)."""
PROCESSING_IN_MILLICORES = "processing_in_millicores"
NUM_MODEL_SLOTS = "num_model_slots"


def _instance_order(instance: int | None) -> tuple[bool, int]:
    return (instance is not None, instance or 0)


@final
@attrs.frozen(order=True)
class Resource:
    """A kind of resource on a device, optionally bound to one device instance.

    ``instance=None`` is *unbound*: any one instance of the device will do
    (on a device with a single instance, as ``main``, that is the only one).
    Immutable, so thread-safe.
    """

    device: str
    kind: str
    # None does not compare with ints: order the unbound resource before instances 0, 1, ...
    instance: int | None = attrs.field(default=None, order=_instance_order)

    def __str__(self) -> str:
        where = self.device if self.instance is None else f"{self.device}:{self.instance}"
        return f"{where}/{self.kind}"


def _check_quantities(_instance: object, _attribute: object, value: Mapping[Resource, int]) -> None:
    for resource, quantity in value.items():
        if not isinstance(resource, Resource):
            raise TypeError(f"allocation keys must be Resource, got {resource!r}")
        if isinstance(quantity, bool) or not isinstance(quantity, int) or quantity < 0:
            raise ValueError(f"quantity of {resource} must be an int >= 0, got {quantity!r}")


def _drop_zeros(value: Mapping[Resource, int]) -> Mapping[Resource, int]:
    return {resource: quantity for resource, quantity in value.items() if quantity}


@final
@attrs.frozen
class ResourceAllocation:
    """Quantities of resources: what a loader needs, or what a limit allows.

    Value type with ``+``, ``-`` (never below zero) and :meth:`contains`.
    Zero quantities are dropped, so equal allocations compare equal.
    Immutable, so thread-safe.
    """

    quantities: Mapping[Resource, int] = attrs.field(
        factory=dict, converter=_drop_zeros, validator=_check_quantities
    )

    @classmethod
    def empty(cls) -> ResourceAllocation:
        """No resources at all."""
        return cls({})

    @classmethod
    def ram_bytes(cls, quantity: int, device: str = MAIN_DEVICE) -> ResourceAllocation:
        """``quantity`` bytes of RAM on ``device`` (unbound instance)."""
        return cls({Resource(device, RAM_IN_BYTES): quantity})

    def __iter__(self) -> Iterator[tuple[Resource, int]]:
        return iter(sorted(self.quantities.items()))

    def __bool__(self) -> bool:
        return bool(self.quantities)

    def quantity(self, resource: Resource) -> int:
        """The quantity of exactly ``resource`` (0 when absent)."""
        return self.quantities.get(resource, 0)

    def __add__(self, other: ResourceAllocation) -> ResourceAllocation:
        total = dict(self.quantities)
        for resource, quantity in other.quantities.items():
            total[resource] = total.get(resource, 0) + quantity
        return ResourceAllocation(total)

    def __sub__(self, other: ResourceAllocation) -> ResourceAllocation:
        """``self`` minus ``other``.

        Requires: ``self`` holds at least ``other`` of every resource (else ValueError).
        """
        rest = dict(self.quantities)
        for resource, quantity in other.quantities.items():
            left = rest.get(resource, 0) - quantity
            if left < 0:
                raise ValueError(
                    f"cannot subtract {quantity} of {resource} from {self.quantity(resource)}"
                )
            rest[resource] = left
        return ResourceAllocation(rest)

    def contains(self, other: ResourceAllocation) -> bool:
        """True when ``other`` fits within ``self``.

        On single-instance devices (``main``) unbound means instance 0.  Per
        device and kind otherwise: an unbound quantity in ``self`` is the capacity of
        every instance not listed bound.  ``other``'s bound quantities must fit
        their instances, and its unbound quantity must fit, on top of them, in
        one single instance (as TF Serving binds an unbound need to one device
        instance): one of the instances named on either side, or, when none
        is named, the unbound capacity.
        """
        limit, need = self._normalized(), other._normalized()
        return all(
            limit._group_contains(need, device, kind)  # noqa: SLF001 - same class
            for device, kind in {(r.device, r.kind) for r in need.quantities}
        )

    def _normalized(self) -> ResourceAllocation:
        """Unbound quantities of single-instance devices bound to instance 0."""
        if not any(r.device in SINGLE_INSTANCE_DEVICES for r in self.quantities):
            return self
        bound: dict[Resource, int] = {}
        for resource, quantity in self.quantities.items():
            if resource.device in SINGLE_INSTANCE_DEVICES and resource.instance is None:
                resource = Resource(resource.device, resource.kind, 0)  # noqa: PLW2901 - rebinding on purpose
            bound[resource] = bound.get(resource, 0) + quantity
        return ResourceAllocation(bound)

    def _group_contains(self, other: ResourceAllocation, device: str, kind: str) -> bool:
        unbound_capacity = self.quantity(Resource(device, kind))
        capacity = {
            r.instance: q
            for r, q in self.quantities.items()
            if (r.device, r.kind) == (device, kind) and r.instance is not None
        }
        needed = {
            r.instance: q
            for r, q in other.quantities.items()
            if (r.device, r.kind) == (device, kind) and r.instance is not None
        }
        if any(q > capacity.get(i, unbound_capacity) for i, q in needed.items()):
            return False
        unbound_need = other.quantity(Resource(device, kind))
        if not unbound_need:
            return True
        instances = capacity.keys() | needed.keys()
        if not instances:
            return unbound_need <= unbound_capacity
        # Without knowing how many instances the device has, the unbound need
        # goes on an instance already named: conservative, never over-commits.
        return any(
            needed.get(i, 0) + unbound_need <= capacity.get(i, unbound_capacity) for i in instances
        )

    def __str__(self) -> str:
        if not self.quantities:
            return "{}"
        return "{" + ", ".join(f"{resource}: {quantity}" for resource, quantity in self) + "}"
