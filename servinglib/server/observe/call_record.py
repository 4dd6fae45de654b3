"""CallRecord: what one finished model call was, the one record every observer is fed."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, final

import attrs
import numpy.typing as npt

from servinglib.errors import StatusCode
from servinglib.servable import CallStages


@final
@attrs.frozen(kw_only=True)
class StreamRecord:
    """What one finished stream was: where it ran, how it ended, its parts and timing.

    ``code`` is OK for a stream read to its end, the error's code for one
    that failed (DEADLINE_EXCEEDED past its deadline), CANCELLED for one
    its reader closed early (the client left, the server stopped).
    ``first_part_s`` runs from the stream's opening to its first part
    reaching the reader (None: no part did); ``duration_s`` to its close.
    Immutable, so thread-safe.
    """

    model_name: str
    version: int
    signature_name: str
    code: StatusCode
    parts: int
    first_part_s: float | None
    duration_s: float


StreamObserver = Callable[[StreamRecord], None]
"""Called once per closed stream, on its event loop: keep it quick, never raise."""


@final
@attrs.define(slots=True)
class CallRecord:
    """One finished model call (or, with ``stream``, one closed stream) of a version.

    ``signature_name`` is the one the request named when the call failed
    before its signature was resolved ("" for the default).  ``stages``: the
    :class:`~servinglib.servable.CallStages` marks between ``started_ns`` (the
    plane took the request) and ``ended_ns``.  ``error``: None for an answer.
    ``inputs``, ``outputs`` (None without an answer) and ``output_filter``
    (None: all) are for the request log; ``log_request`` is False when the
    caller logs the request itself.  A stream's record has no outputs.
    Not mutated once handed to observers, who must not change it either:
    read from one thread at a time, in observer order.
    """

    model_name: str
    version: int
    signature_name: str
    started_ns: int
    ended_ns: int
    stages: CallStages
    error: BaseException | None
    inputs: Mapping[str, npt.NDArray[Any]]
    outputs: Mapping[str, npt.NDArray[Any]] | None = None
    output_filter: tuple[str, ...] | None = None
    log_request: bool = True
    stream: StreamRecord | None = None


class CallObserver(Protocol):
    """Told of every finished call of a DataPlane it was given to.

    Important: :meth:`call_finished` runs on the thread that ended the call
    (an event loop, a worker, a server thread), before the answer leaves:
    keep it to microseconds (queue anything slower, as the request logger
    does) and never raise; an exception it raises is logged and dropped.
    Thread safety: called from many threads at once.
    """

    def call_finished(self, record: CallRecord) -> None:
        """Takes note of ``record``."""


@final
class StreamObserverAdapter:
    """Feeds a :data:`StreamObserver` function the stream records among the calls.

    Thread-safe if the function is.
    """

    def __init__(self, on_stream: StreamObserver) -> None:
        self._on_stream = on_stream

    def call_finished(self, record: CallRecord) -> None:
        """Calls the function with ``record.stream`` when there is one."""
        if record.stream is not None:
            self._on_stream(record.stream)
