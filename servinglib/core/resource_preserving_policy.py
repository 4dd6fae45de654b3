"""ResourcePreservingPolicy: unload the old version before loading the new one."""

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

_FINISHED = frozenset({HarnessState.DISABLED, HarnessState.ERROR})


@final
class ResourcePreservingPolicy(AspiredVersionPolicy):
    """Never holds an old and a new version at once, at the cost of a gap in serving.

    TF Serving's rules: unload the first un-aspired READY version; else, while
    any un-aspired version is not yet DISABLED or in ERROR, wait; else load the
    highest aspired NEW version.  For models that take most of the host's
    memory.  Stateless, so thread-safe.
    """

    def next_action(
        self, versions: Sequence[AspiredServableStateSnapshot]
    ) -> ServableAction | None:
        for version in versions:
            if not version.is_aspired and version.state is HarnessState.READY:
                return ServableAction(Action.UNLOAD, version.id)
        if any(not v.is_aspired and v.state not in _FINISHED for v in versions):
            return None
        to_load = self.highest_aspired_new_version(versions)
        return ServableAction(Action.LOAD, to_load) if to_load is not None else None
