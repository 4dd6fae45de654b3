"""Least-recently-used eviction: which resident models make room for a load under a budget."""

from __future__ import annotations

from collections.abc import Sequence
from typing import final

import attrs


@final
@attrs.frozen
class ResidentModel:
    """A model holding part of the budget, as the eviction choice sees it.

    ``ram_bytes``: its versions' estimates; ``last_used``: when a request last
    named it (a tick: larger is later); ``evictable``: loaded, loaded on demand
    (not pinned) and no request in flight.  Immutable, so thread-safe.
    """

    name: str
    ram_bytes: int
    last_used: int
    evictable: bool


def choose_evictions(
    resident: Sequence[ResidentModel], needed_bytes: int, budget_bytes: int
) -> list[str] | None:
    """The models to unload, least recently used first, so ``needed_bytes`` more fit.

    ``[]`` when they fit already; None when they do not fit even with every
    evictable model unloaded (then unload none).  A pure function.
    """
    excess = sum(model.ram_bytes for model in resident) + needed_bytes - budget_bytes
    if excess <= 0:
        return []
    chosen = []
    for model in sorted((m for m in resident if m.evictable), key=lambda m: m.last_used):
        chosen.append(model.name)
        excess -= model.ram_bytes
        if excess <= 0:
            return chosen
    return None
