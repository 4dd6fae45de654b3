"""StreamLimits: what a DataPlane's streams may hold, server-wide and per model."""

from __future__ import annotations

from typing import Final, final

import attrs

DEFAULT_MAX_BUFFERED_BYTES: Final = 64 << 20
DEFAULT_MAX_STREAMS_PER_MODEL: Final = 64
DEFAULT_IDLE_TIMEOUT_S: Final = 60.0


_positive = attrs.validators.gt(0)


@final
@attrs.frozen(kw_only=True)
class StreamLimits:
    """The bounds of a DataPlane's streams (:meth:`DataPlane.open_stream`).

    ``max_buffered_bytes``: parts all streams made and not yet handed to
    their clients; past it every stream's next part waits.
    ``max_streams_per_model``: past it a stream is refused with UNAVAILABLE.
    ``idle_timeout_s``: how long a full stream may wait for its reader, then
    it ends with DEADLINE_EXCEEDED.  Defaults: docs/guides/streaming.md.
    Immutable, so thread-safe.
    """

    max_buffered_bytes: int = attrs.field(default=DEFAULT_MAX_BUFFERED_BYTES, validator=_positive)
    max_streams_per_model: int = attrs.field(
        default=DEFAULT_MAX_STREAMS_PER_MODEL, validator=_positive
    )
    idle_timeout_s: float = attrs.field(
        default=DEFAULT_IDLE_TIMEOUT_S, validator=attrs.validators.gt(0.0)
    )
