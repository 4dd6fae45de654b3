"""AspiredVersionPolicy: decides the next load or unload for one servable name."""

from __future__ import annotations

import abc
import enum
from collections.abc import Sequence
from typing import final

import attrs

from servinglib.core.loader_harness import HarnessState
from servinglib.core.servable_id import ServableId


@final
class Action(enum.Enum):
    """What a policy asks the manager to do."""

    LOAD = "load"
    UNLOAD = "unload"


@final
@attrs.frozen
class ServableAction:
    """Load or unload one servable version.  Immutable, so thread-safe."""

    action: Action
    id: ServableId


@final
@attrs.frozen
class AspiredServableStateSnapshot:
    """One managed version as a policy sees it: its harness state and whether it is aspired.

    Immutable, so thread-safe.
    """

    id: ServableId
    state: HarnessState
    is_aspired: bool


class AspiredVersionPolicy(abc.ABC):
    """Chooses, from a snapshot of all versions of one servable name, the next action.

    Important: implementations are pure functions of the snapshot (no state,
    no I/O), so they are trivially thread-safe and table-testable.  The
    manager asks every changed name and takes at most one action per name
    and step, unloads first.
    """

    @abc.abstractmethod
    def next_action(
        self, versions: Sequence[AspiredServableStateSnapshot]
    ) -> ServableAction | None:
        """The next action for this name's ``versions``, or None for nothing to do.

        Requires: every snapshot is of the same servable name.
        """

    @staticmethod
    def highest_aspired_new_version(
        versions: Sequence[AspiredServableStateSnapshot],
    ) -> ServableId | None:
        """The id of the highest aspired version still in NEW, if any."""
        candidates = [v.id for v in versions if v.is_aspired and v.state is HarnessState.NEW]
        return max(candidates, key=lambda servable_id: servable_id.version, default=None)
