"""static_manager: a ready manager serving given objects, for code that takes handles."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping

from servinglib.core.aspired_versions_manager import AspiredVersionsManager
from servinglib.core.availability_preserving_policy import AvailabilityPreservingPolicy
from servinglib.core.event_bus import EventBus
from servinglib.core.loader import Loader
from servinglib.core.servable_data import ServableData
from servinglib.core.servable_id import ServableId
from servinglib.core.servable_state import ServableState
from servinglib.core.simple_loader import SimpleLoader
from servinglib.testing._waiters import run_until


@contextlib.contextmanager
def static_manager(
    servables: Mapping[str, Mapping[int, object]] | Mapping[ServableId, object],
    *,
    event_bus: EventBus[ServableState] | None = None,
) -> Iterator[AspiredVersionsManager]:
    """A manager already serving ``servables``, each object as is; closed on leaving the block.

    ``servables`` maps name → version → object, or ServableId → object.  The
    manager is a real AspiredVersionsManager stepped by hand, so the code
    under test gets real handles and errors.  ``event_bus``: where lifecycle
    events go (e.g. a ServableStateMonitor's bus).
    Thread safety: the manager is thread-safe.
    """
    wanted = _by_name(servables)
    manager = AspiredVersionsManager(
        AvailabilityPreservingPolicy(), manage_state_interval_s=None, event_bus=event_bus
    )
    with manager:
        for name, versions in wanted.items():
            manager.set_aspired_versions(
                name,
                [
                    ServableData.of(ServableId(name, v), _serving(obj))
                    for v, obj in versions.items()
                ],
            )
        expected = {ServableId(name, v) for name, versions in wanted.items() for v in versions}
        run_until(manager, lambda: set(manager.list_available_servable_ids()) == expected)
        yield manager


def _by_name(
    servables: Mapping[str, Mapping[int, object]] | Mapping[ServableId, object],
) -> dict[str, dict[int, object]]:
    by_name: dict[str, dict[int, object]] = {}
    for key, value in servables.items():
        if isinstance(key, ServableId):
            by_name.setdefault(key.name, {})[key.version] = value
        elif isinstance(key, str) and isinstance(value, Mapping):
            by_name.setdefault(key, {}).update(value)
        else:
            raise TypeError(
                "servables maps name → {version: object} or ServableId → object, got key "
                f"{key!r} → {type(value).__name__}"
            )
    return by_name


def _serving(servable: object) -> Loader:
    return SimpleLoader(lambda: servable)
