"""ServableState: the lifecycle events a manager publishes."""

from __future__ import annotations

import enum
from typing import final

import attrs

from servinglib.core.servable_id import ServableId
from servinglib.errors import ServingError


@final
class ManagerState(enum.Enum):
    """A servable version's state as the outside world sees it.

    START → LOADING → AVAILABLE → UNLOADING → END; a failure goes to END with
    an error health.  AVAILABLE is published only once handles to the version
    can be obtained; UNLOADING before the version stops being obtainable.
    """

    START = "START"
    LOADING = "LOADING"
    AVAILABLE = "AVAILABLE"
    UNLOADING = "UNLOADING"
    END = "END"

    def __str__(self) -> str:
        return self.value


@final
@attrs.frozen
class ServableState:
    """One event: a servable version entered ``manager_state``; ``health`` is its error, if any.

    Immutable, so thread-safe.
    """

    id: ServableId
    manager_state: ManagerState
    health: ServingError | None = None

    @property
    def ok(self) -> bool:
        """True when the servable has no error."""
        return self.health is None
