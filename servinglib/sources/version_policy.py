"""ServableVersionPolicy: which of the versions on storage a servable should serve."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import final

import attrs

from servinglib.errors import InvalidArgumentError


@final
class VersionPolicyKind(enum.Enum):
    """The three choices of TF Serving's ``ServableVersionPolicy``."""

    LATEST = "latest"
    ALL = "all"
    SPECIFIC = "specific"


def _check(policy: ServableVersionPolicy) -> None:
    if policy.kind is VersionPolicyKind.LATEST and policy.num_versions < 1:
        raise InvalidArgumentError(
            f"latest version policy needs num_versions >= 1, got {policy.num_versions}"
        )
    if policy.kind is VersionPolicyKind.SPECIFIC:
        if not policy.versions:
            raise InvalidArgumentError("specific version policy needs at least one version")
        if any(v < 0 for v in policy.versions):
            raise InvalidArgumentError(f"versions must be >= 0, got {sorted(policy.versions)}")


@final
@attrs.frozen
class ServableVersionPolicy:
    """Latest N versions (the default, N=1), all versions, or specific versions.

    Build it with :meth:`latest`, :meth:`all` or :meth:`specific`.  With
    ``specific``, versions not on storage are simply not aspired.
    Immutable, so thread-safe.
    """

    kind: VersionPolicyKind = VersionPolicyKind.LATEST
    num_versions: int = 1
    versions: frozenset[int] = frozenset()

    def __attrs_post_init__(self) -> None:
        _check(self)

    @classmethod
    def latest(cls, num_versions: int = 1) -> ServableVersionPolicy:
        """The ``num_versions`` highest versions on storage."""
        return cls(VersionPolicyKind.LATEST, num_versions=num_versions)

    @classmethod
    def all(cls) -> ServableVersionPolicy:
        """Every version on storage."""
        return cls(VersionPolicyKind.ALL)

    @classmethod
    def specific(cls, versions: Iterable[int]) -> ServableVersionPolicy:
        """Exactly these versions, those of them that are on storage."""
        return cls(VersionPolicyKind.SPECIFIC, versions=frozenset(versions))

    def select(self, available: Iterable[int]) -> list[int]:
        """The versions to aspire among ``available``, ascending."""
        found = sorted(set(available))
        if self.kind is VersionPolicyKind.LATEST:
            return found[-self.num_versions :]
        if self.kind is VersionPolicyKind.ALL:
            return found
        return [v for v in found if v in self.versions]

    def __str__(self) -> str:
        if self.kind is VersionPolicyKind.LATEST:
            return f"latest({self.num_versions})"
        if self.kind is VersionPolicyKind.ALL:
            return "all"
        return f"specific({', '.join(map(str, sorted(self.versions)))})"
