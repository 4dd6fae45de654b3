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

    ``max_buffered_bytes``: the parts all streams have made and not yet
    handed to their clients, in bytes (64 MiB); past it every stream's
    next part waits, its model's iterator not advanced, for room.
    ``max_streams_per_model``: streams of one model open at once (64); the
    next one is refused at once with UNAVAILABLE naming the bound.
    ``idle_timeout_s``: how long a stream whose buffer is full may wait for
    its reader to take a part (60 s); past it the stream ends with
    DEADLINE_EXCEEDED and the parts it held are dropped.
    Immutable, so thread-safe.
    """

    max_buffered_bytes: int = attrs.field(default=DEFAULT_MAX_BUFFERED_BYTES, validator=_positive)
    max_streams_per_model: int = attrs.field(
        default=DEFAULT_MAX_STREAMS_PER_MODEL, validator=_positive
    )
    idle_timeout_s: float = attrs.field(
        default=DEFAULT_IDLE_TIMEOUT_S, validator=attrs.validators.gt(0.0)
    )
