"""ServableId: what one loaded model version is called."""

from __future__ import annotations

from typing import final

import attrs


def check_name(_instance: object, _attribute: object, name: str) -> None:
    """attrs validator: a servable name is a non-empty string."""
    if not name:
        raise ValueError("a servable name must not be empty")


def check_version(_instance: object, _attribute: object, version: int) -> None:
    """attrs validator: a servable version is an int >= 0 (not a bool)."""
    if isinstance(version, bool) or not isinstance(version, int):
        raise TypeError(f"a servable version must be an int, got {version!r}")
    if version < 0:
        raise ValueError(f"a servable version must be >= 0, got {version}")


@final
@attrs.frozen(order=True)
class ServableId:
    """A servable stream's name and one version of it (an int >= 0).

    Ordered by (name, version).  Immutable, so thread-safe.
    """

    name: str = attrs.field(validator=check_name)
    version: int = attrs.field(validator=check_version)

    def __str__(self) -> str:
        return f"{{name: {self.name} version: {self.version}}}"
