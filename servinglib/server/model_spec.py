"""ModelSpec: which model, which version (number, label or latest), which signature."""

from __future__ import annotations

from typing import final

import attrs

from servinglib.core.servable_id import check_name, check_version


def _one_selector(spec: ModelSpec) -> None:
    if spec.version is not None and spec.version_label is not None:
        raise ValueError("a ModelSpec selects a version or a version_label, not both")


@final
@attrs.frozen
class ModelSpec:
    """A request's model: ``name``, and ``version`` or ``version_label`` (neither: latest).

    ``signature_name`` empty means ``serving_default``.  TF Serving's
    ``ModelSpec``.  Immutable, so thread-safe.
    """

    name: str = attrs.field(validator=check_name)
    version: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(check_version)
    )
    version_label: str | None = None
    signature_name: str = ""

    def __attrs_post_init__(self) -> None:
        _one_selector(self)

    @classmethod
    def latest(cls, name: str, signature_name: str = "") -> ModelSpec:
        """The highest available version of ``name``."""
        return cls(name, signature_name=signature_name)

    @classmethod
    def specific(cls, name: str, version: int, signature_name: str = "") -> ModelSpec:
        """Exactly ``version`` of ``name``."""
        return cls(name, version, signature_name=signature_name)

    @classmethod
    def labeled(cls, name: str, version_label: str, signature_name: str = "") -> ModelSpec:
        """The version ``version_label`` points at (e.g. ``stable``)."""
        return cls(name, version_label=version_label, signature_name=signature_name)

    def __str__(self) -> str:
        if self.version is not None:
            return f"{self.name} version {self.version}"
        if self.version_label is not None:
            return f"{self.name} version label {self.version_label}"
        return f"{self.name} (latest)"
