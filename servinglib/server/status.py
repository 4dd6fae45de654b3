"""What the server says of a model: its versions' states and errors, and a version's metadata."""

from __future__ import annotations

from collections.abc import Mapping
from typing import final

import attrs

from servinglib.core.servable_state import ManagerState
from servinglib.errors import ServingError
from servinglib.servable import SignatureSpec


@final
@attrs.frozen
class VersionStatus:
    """One version's published state and its error, if any.  Immutable."""

    version: int
    state: ManagerState
    error: ServingError | None = None


@final
@attrs.frozen
class ModelStatus:
    """A model's versions, newest first, and a model-level problem (storage, failed start)."""

    name: str
    versions: tuple[VersionStatus, ...]
    error: ServingError | None = None


@final
@attrs.frozen
class ModelMetadata:
    """What a loaded version offers: its platform and signatures.  Immutable."""

    name: str
    version: int
    platform: str
    signatures: Mapping[str, SignatureSpec]
