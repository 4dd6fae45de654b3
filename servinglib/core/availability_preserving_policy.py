"""AvailabilityPreservingPolicy: load the new version before unloading the last old one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import final

from servinglib.core.aspired_version_policy import (
    Action,
    AspiredServableStateSnapshot,
    AspiredVersionPolicy,
    ServableAction,
)
from servinglib.core.loader_harness import HarnessState


@final
class AvailabilityPreservingPolicy(AspiredVersionPolicy):
    """Keeps a version serving across a swap, at the cost of briefly holding two.

    TF Serving's rules: unload the lowest un-aspired READY version when no
    version is aspired, or an aspired version is READY, or more than one
    un-aspired version is READY; otherwise load the highest aspired NEW one.
    So the last old version is unloaded only once a new one serves (or when
    nothing is aspired any more).  Stateless, so thread-safe.
    """

    def next_action(
        self, versions: Sequence[AspiredServableStateSnapshot]
    ) -> ServableAction | None:
        has_aspired = any(v.is_aspired for v in versions)
        has_aspired_ready = any(v.is_aspired and v.state is HarnessState.READY for v in versions)
        unaspired_ready = [
            v for v in versions if not v.is_aspired and v.state is HarnessState.READY
        ]
        if unaspired_ready and (not has_aspired or has_aspired_ready or len(unaspired_ready) > 1):
            lowest = min(unaspired_ready, key=lambda v: v.id.version)
            return ServableAction(Action.UNLOAD, lowest.id)
        to_load = self.highest_aspired_new_version(versions)
        return ServableAction(Action.LOAD, to_load) if to_load is not None else None
