"""Resources a loader needs (device, instance, kind) and allocations of them."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import final

import attrs

MAIN_DEVICE = "main"
"""The host (CPU and its RAM): TF Serving's ``device_types::kMain``."""
GPU_DEVICE = "gpu"
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

        A bound resource in ``other`` needs at least its quantity of the same
        bound resource (or of the unbound one, which stands for every instance).
        An unbound resource in ``other`` fits if the unbound resource or any one
        bound instance of that device and kind has room for it.
        """
        for resource, quantity in other.quantities.items():
            if resource.instance is not None:
                room = max(self.quantity(resource), self.quantity(_unbound(resource)))
            else:
                room = max(
                    (q for r, q in self.quantities.items() if _unbound(r) == resource),
                    default=0,
                )
            if quantity > room:
                return False
        return True

    def __str__(self) -> str:
        if not self.quantities:
            return "{}"
        return "{" + ", ".join(f"{resource}: {quantity}" for resource, quantity in self) + "}"


def _unbound(resource: Resource) -> Resource:
    return Resource(resource.device, resource.kind)
