"""StorageCondition: what a source last found in the storage of one servable."""

from __future__ import annotations

from typing import final

import attrs

from servinglib.core.servable_id import check_name
from servinglib.errors import ServingError


@final
@attrs.frozen
class StorageCondition:
    """What a source found at its last look at one servable's storage (its base path).

    ``error``: why the storage cannot be used now; what the source emitted
    before keeps serving.  ``holds_no_version``: the storage was read and
    holds no version to serve, nor one on its way.  Neither (:attr:`clear`):
    the storage is fine, or the source no longer watches the servable.  A
    source publishes one when a servable's condition changed, and a clear one
    when it stops watching it.
    Immutable, so thread-safe.
    """

    servable_name: str = attrs.field(validator=check_name)
    error: ServingError | None = None
    holds_no_version: bool = False

    @property
    def clear(self) -> bool:
        """True when there is nothing to say: no error, and versions there (or not watched)."""
        return self.error is None and not self.holds_no_version
