"""ResourceTracker: reserves loaders' resource estimates against a total limit."""

from __future__ import annotations

from collections.abc import Iterable
from typing import final

import attrs

from servinglib.core.loader import Loader
from servinglib.core.resources import ResourceAllocation


@final
@attrs.frozen
class ResourceStatistics:
    """The limit, what is reserved, and how many reservations were refused.

    Immutable, so thread-safe.
    """

    total: ResourceAllocation
    used: ResourceAllocation
    refused_reservations: int


@final
class ResourceTracker:
    """Keeps the sum of live loaders' estimates within ``total`` (e.g. RAM bytes).

    The manager calls :meth:`recompute_used_resources` with the loaders that
    hold resources (approved for load, loading, serving or unloading), then
    :meth:`reserve` for the loader about to load, both within its serialized
    decision phase.
    Thread safety: the mutating calls must be serialized by the caller (the
    manager's decision lock); :meth:`statistics` may be called from any thread.
    """

    def __init__(self, total: ResourceAllocation) -> None:
        self._total = total
        self._used = ResourceAllocation.empty()  # guarded by: the manager's decision lock
        self._refused = 0  # guarded by: the manager's decision lock

    @property
    def total(self) -> ResourceAllocation:
        """The limit."""
        return self._total

    @property
    def used(self) -> ResourceAllocation:
        """What is reserved now."""
        return self._used

    def recompute_used_resources(self, loaders: Iterable[Loader]) -> None:
        """Sets the reserved amount to the sum of ``loaders``' current estimates."""
        used = ResourceAllocation.empty()
        for loader in loaders:
            used += loader.estimate_resources()
        self._used = used

    def reserve(self, loader: Loader) -> bool:
        """Adds ``loader``'s estimate to the reserved amount if the total still fits.

        Returns False (reserving nothing) when it would not fit.
        """
        wanted = self._used + loader.estimate_resources()
        if not self._total.contains(wanted):
            self._refused += 1
            return False
        self._used = wanted
        return True

    def statistics(self) -> ResourceStatistics:
        """A snapshot of the limit and what is reserved."""
        return ResourceStatistics(self._total, self._used, self._refused)
