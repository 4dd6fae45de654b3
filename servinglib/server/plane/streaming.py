"""InferenceStream: one request's answer in parts, read by a front end as an async iterator.

A streaming signature's parts are produced by a task of the stream's own
(running a ``stream_producer``) into a buffer of ``buffer_parts``: a slow
reader holds the model back instead of growing memory.  The deadline bounds
the whole stream.  Closing the stream early (the client left, the server
stopped) cancels the producer and
closes the model's iterator, so a generator's ``finally`` runs, before
the version's handle is released: the stream counts as one request in
flight for its whole life, and its version cannot unload under it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final, final

import attrs
import numpy.typing as npt

from servinglib.errors import (
    DeadlineExceededError,
    InternalError,
    ServingError,
    StatusCode,
)
from servinglib.server.plane.call_pool import CallSite

DEFAULT_BUFFER_PARTS: Final = 8
"""How many parts a stream produces ahead of its reader, by default."""

Part = dict[str, npt.NDArray[Any]]


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
class InferenceStream:
    """An open stream of one signature call's parts; ``async with`` it and iterate it.

    Iterating gives each part (a mapping of output name to array); the
    stream ends with StopAsyncIteration, or raises the ServingError that
    ended it (DeadlineExceededError past the deadline; a model's error
    after the parts before it).  :meth:`aclose` (``async with`` calls it)
    stops a stream not read to its end: nothing of it is left running when
    it returns.  ``model_name``, ``version`` and ``signature_name`` say
    what serves it; ``streaming`` whether the signature streams.
    Not thread-safe: read and close it from one task on one event loop.
    """

    def __init__(
        self,
        site: CallSite,
        produce: Callable[[Callable[[Part], Awaitable[None]]], Awaitable[None]],
        *,
        release: Callable[[], None],
        deadline: float | None,
        buffer_parts: int,
        observer: StreamObserver | None,
        streaming: bool = True,
        on_close: Callable[[InferenceStream], None] | None = None,
    ) -> None:
        if buffer_parts < 1:
            raise ValueError(f"buffer_parts must be at least 1, got {buffer_parts}")
        self._site = site
        self._streaming = streaming
        self._produce = produce
        self._release = release
        self._deadline = deadline
        self._observer = observer
        self._opened = time.monotonic()
        self._parts: collections.deque[Part] = collections.deque()
        self._buffer_parts = buffer_parts
        self._changed: asyncio.Event | None = None  # made on the loop, at the first read
        self._producer: asyncio.Task[None] | None = None
        self._ended = False  # the producer is done: no part will be added
        self._error: ServingError | None = None
        self._count = 0
        self._first_part_s: float | None = None
        self._closed = False
        self._on_close = on_close
        self._loop: asyncio.AbstractEventLoop | None = None
        self._cut_error: ServingError | None = None

    @property
    def model_name(self) -> str:
        """The model serving the stream."""
        return self._site.model_name

    @property
    def version(self) -> int:
        """The version serving the stream."""
        return self._site.version

    @property
    def signature_name(self) -> str:
        """The signature serving the stream."""
        return self._site.signature_name

    @property
    def streaming(self) -> bool:
        """True for a streaming signature; False for one giving its outputs as one part."""
        return self._streaming

    def __aiter__(self) -> InferenceStream:
        return self

    async def __anext__(self) -> Part:
        if self._producer is None:
            if self._closed:
                raise StopAsyncIteration
            self._changed = asyncio.Event()
            self._loop = asyncio.get_running_loop()
            self._producer = asyncio.create_task(self._run(), name=f"stream {self._site}")
        changed = self._changed
        assert changed is not None
        while not self._parts:
            if self._ended:
                if self._error is not None:
                    raise self._error
                raise StopAsyncIteration
            changed.clear()
            await changed.wait()
        part = self._parts.popleft()
        changed.set()  # room for the producer
        self._count += 1
        if self._first_part_s is None:
            self._first_part_s = time.monotonic() - self._opened
        return part

    def take_ready(self) -> list[Part]:
        """The parts made and not read yet, without waiting (to send several at once)."""
        parts = list(self._parts)
        if parts:
            self._parts.clear()
            self._count += len(parts)
            if self._changed is not None:
                self._changed.set()  # room for the producer
        return parts

    async def aclose(self) -> None:
        """Stops the stream if it runs (closing the model's iterator), then records it.

        Idempotent.  Returns once the producer has ended and the version's
        handle is released.
        """
        if self._closed:
            return
        self._closed = True
        producer = self._producer
        finished = self._ended and not self._parts
        try:
            if producer is None:
                self._release()
            elif not producer.done():
                producer.cancel()
                await asyncio.gather(producer, return_exceptions=True)
        finally:
            self._record(finished)
            if self._on_close is not None:
                self._on_close(self)

    def cut_off(self, error: ServingError) -> None:
        """Ends a running stream with ``error`` (at shutdown): its reader gets the parts it
        has, then the error; the model's iterator is closed.  From any thread; no effect on a
        stream not started or ended."""
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nothing runs
                loop.call_soon_threadsafe(self._cut, error)

    def _cut(self, error: ServingError) -> None:
        producer = self._producer
        if producer is not None and not producer.done():
            self._cut_error = error
            producer.cancel()

    async def __aenter__(self) -> InferenceStream:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.aclose()

    async def _run(self) -> None:
        """The producer: parts into the buffer, then the outcome; the handle released last."""
        try:
            if self._deadline is None:
                await self._produce(self._put)
            else:
                async with asyncio.timeout(max(0.0, self._deadline - time.monotonic())):
                    await self._produce(self._put)
        except asyncio.CancelledError:
            if self._cut_error is None or self._closed:
                raise
            self._error = self._cut_error  # cut off: the reader gets the error, not a cancel
        except TimeoutError:
            self._error = DeadlineExceededError("Deadline exceeded before the stream ended")
        except ServingError as error:
            self._error = error
        except Exception as error:  # noqa: BLE001 - a model's own exception ends its stream
            self._error = InternalError(f"{type(error).__name__}: {error}")
        finally:
            self._ended = True
            if self._changed is not None:
                self._changed.set()
            self._release()

    async def _put(self, part: Part) -> None:
        changed = self._changed
        assert changed is not None
        while len(self._parts) >= self._buffer_parts:
            changed.clear()
            await changed.wait()
        self._parts.append(part)
        changed.set()

    def _record(self, finished: bool) -> None:
        if self._observer is None:
            return
        if self._error is not None:
            code = self._error.code
        else:
            code = StatusCode.OK if finished else StatusCode.CANCELLED
        self._observer(
            StreamRecord(
                model_name=self._site.model_name,
                version=self._site.version,
                signature_name=self._site.signature_name,
                code=code,
                parts=self._count,
                first_part_s=self._first_part_s,
                duration_s=time.monotonic() - self._opened,
            )
        )


@final
class OpenStreams:
    """The streams of a DataPlane not closed yet, to cut them off at shutdown.  Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._streams: set[InferenceStream] = set()  # guarded by: _lock

    def add(self, stream: InferenceStream) -> None:
        """Counts ``stream`` until it closes (pass :meth:`discard` as its ``on_close``)."""
        with self._lock:
            self._streams.add(stream)

    def discard(self, stream: InferenceStream) -> None:
        """Forgets a closed stream."""
        with self._lock:
            self._streams.discard(stream)

    def __len__(self) -> int:
        with self._lock:
            return len(self._streams)

    def cut_off(self, error: ServingError) -> int:
        """Ends every open stream with ``error``; how many there were."""
        with self._lock:
            streams = list(self._streams)
        for stream in streams:
            stream.cut_off(error)
        return len(streams)
