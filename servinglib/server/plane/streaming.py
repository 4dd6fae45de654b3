"""InferenceStream: one request's answer in parts, read by a front end as an async iterator."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final, final

import numpy.typing as npt

from servinglib.errors import (
    DeadlineExceededError,
    InternalError,
    ServingError,
    StatusCode,
    UnavailableError,
)
from servinglib.servable import CallSite
from servinglib.server.observe.call_record import StreamObserver, StreamRecord
from servinglib.server.plane.stream_budget import StreamBudget, part_bytes

DEFAULT_BUFFER_PARTS: Final = 8
"""How many parts a stream produces ahead of its reader, by default."""

Part = dict[str, npt.NDArray[Any]]


@final
class InferenceStream:
    """An open stream of one signature call's parts; ``async with`` it and iterate it.

    Iterating gives each part (output name to array); the stream ends with
    StopAsyncIteration, or raises the ServingError that ended it
    (DeadlineExceededError past the deadline; a model's error after the parts
    before it).  :meth:`aclose` stops a stream not read to its end: nothing
    of it is left running when it returns.  With a ``budget``, each part is
    charged to it from entering the buffer until the reader asks for the
    next part (or closes).  With ``idle_timeout_s``, a producer that waited
    that long for room while its reader left parts unread ends the stream
    with DEADLINE_EXCEEDED, its buffered parts dropped.
    Not thread-safe: read and close it from one task on one event loop.
    """

    def __init__(
        self,
        site: CallSite,
        produce: Callable[[Callable[[Part], Awaitable[None]], Callable[[], int]], Awaitable[None]],
        *,
        release: Callable[[], None],
        deadline: float | None,
        buffer_parts: int,
        observer: StreamObserver | None,
        streaming: bool = True,
        on_close: Callable[[InferenceStream], None] | None = None,
        budget: StreamBudget | None = None,
        idle_timeout_s: float | None = None,
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
        self._parts: collections.deque[tuple[Part, int]] = collections.deque()  # with its bytes
        self._budget = budget
        self._idle_timeout_s = idle_timeout_s
        self._taken_bytes = 0  # charged for the parts the reader took last
        self._reader_waits = False  # the reader waits in __anext__ for a part
        self._handed_lock = threading.Lock()
        self._handed_bytes = 0  # guarded by: _handed_lock; handed over, not yet sent
        self._last_read = time.monotonic()  # when the reader last came for parts
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
        self._release_taken()  # the reader is back: it is done with the parts it took
        self._last_read = time.monotonic()
        while not self._parts:
            if self._ended:
                if self._error is not None:
                    raise self._error
                raise StopAsyncIteration
            changed.clear()
            if not self._reader_waits and self._budget is not None:
                self._budget.wake()  # its producer's part is now urgent
            self._reader_waits = True
            try:
                await changed.wait()
            finally:
                self._reader_waits = False
        part, self._taken_bytes = self._parts.popleft()
        changed.set()  # room for the producer
        self._count += 1
        if self._first_part_s is None:
            self._first_part_s = time.monotonic() - self._opened
        return part

    def hand_over(self) -> Callable[[], None]:
        """Makes the caller responsible for the parts taken last: call the result once sent.

        For a reader that queues parts to send later: their bytes stay
        charged until then, instead of until it asks for the next part; and
        until then the stream's next parts are not urgent (its client is
        behind).  The result may be called from any thread, more than once.
        """
        nbytes, self._taken_bytes = self._taken_bytes, 0
        if not nbytes or self._budget is None:
            return _nothing
        budget = self._budget
        with self._handed_lock:
            self._handed_bytes += nbytes
        released = False

        def release() -> None:
            nonlocal released
            with self._handed_lock:
                if released:
                    return
                released = True
                self._handed_bytes -= nbytes
            budget.release(nbytes)

        return release

    def take_ready(self) -> list[Part]:
        """The parts made and not read yet, without waiting (to send several at once)."""
        parts = [part for part, _nbytes in self._parts]
        self._last_read = time.monotonic()
        if parts:
            self._taken_bytes += sum(nbytes for _part, nbytes in self._parts)
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
            self._release_taken()
            self._drop_parts()
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
                await self._produce(self._put, self._room)
            else:
                async with asyncio.timeout(max(0.0, self._deadline - time.monotonic())):
                    await self._produce(self._put, self._room)
        except asyncio.CancelledError:
            if self._cut_error is None or self._closed:
                raise
            self._error = self._cut_error  # cut off: the reader gets the error, not a cancel
        except _ReaderIdle:
            self._error = DeadlineExceededError(
                f"The client read no part for {self._idle_timeout_s:g} s: the stream is ended"
            )
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
        nbytes = 0 if self._budget is None else part_bytes(part)
        while True:
            try:
                async with asyncio.timeout(self._idle_timeout_s):
                    await self._room_for(nbytes)
                break
            except TimeoutError:
                idle_s = time.monotonic() - self._last_read
                if self._parts and self._idle_timeout_s and idle_s >= self._idle_timeout_s:
                    self._drop_parts()  # before the model's iterator closes: nobody reads them
                    raise _ReaderIdle from None
        self._parts.append((part, nbytes))
        assert self._changed is not None
        self._changed.set()

    def _room(self) -> int:
        """Free places in the buffer (how many parts a producer may make in one go)."""
        return self._buffer_parts - len(self._parts)

    async def _room_for(self, nbytes: int) -> None:
        """Waits for room in the buffer, then charges ``nbytes`` to the budget."""
        changed = self._changed
        assert changed is not None
        while len(self._parts) >= self._buffer_parts:
            changed.clear()
            await changed.wait()
        if self._budget is not None:
            await self._budget.charge(nbytes, self._urgent)

    def _urgent(self) -> bool:
        """Whether the client waits for the next part: the reader waits, all it took was sent."""
        with self._handed_lock:
            return self._reader_waits and not self._handed_bytes

    def _release_taken(self) -> None:
        if self._budget is not None and self._taken_bytes:
            self._budget.release(self._taken_bytes)
        self._taken_bytes = 0

    def _drop_parts(self) -> None:
        """Forgets the buffered parts (the stream closes, or its reader is gone)."""
        if self._budget is not None:
            self._budget.release(sum(nbytes for _part, nbytes in self._parts))
        self._parts.clear()

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


def _nothing() -> None:
    pass


class _ReaderIdle(Exception):  # noqa: N818 - a stream's outcome, raised inside its producer
    """The buffer stayed full for the idle timeout: the reader took no part."""


@final
class OpenStreams:
    """The streams of a DataPlane not closed yet, to cut them off at shutdown.

    At most ``max_per_model`` streams of one model are open at once
    (None: no bound): :meth:`enter` takes a place, or refuses.
    Thread-safe.
    """

    def __init__(self, max_per_model: int | None = None) -> None:
        self._max_per_model = max_per_model
        self._lock = threading.Lock()
        self._streams: set[InferenceStream] = set()  # guarded by: _lock
        self._per_model: dict[str, int] = {}  # guarded by: _lock; models with none left out

    def enter(self, model_name: str) -> None:
        """Takes a place for a stream of ``model_name``, to :meth:`add` it (or :meth:`leave`).

        Raises UnavailableError at once, naming the bound, when the model has
        ``max_per_model`` streams open.
        """
        with self._lock:
            count = self._per_model.get(model_name, 0)
            if self._max_per_model is not None and count >= self._max_per_model:
                raise UnavailableError(
                    f"Model {model_name} is at its limit of {self._max_per_model} open streams; "
                    "retry later"
                )
            self._per_model[model_name] = count + 1

    def leave(self, model_name: str) -> None:
        """Gives back the place :meth:`enter` took, for a stream that was not opened."""
        with self._lock:
            self._leave_locked(model_name)

    def add(self, stream: InferenceStream) -> None:
        """Counts ``stream`` (in the place :meth:`enter` took) until it closes.

        Pass :meth:`discard` as its ``on_close``.
        """
        with self._lock:
            self._streams.add(stream)

    def discard(self, stream: InferenceStream) -> None:
        """Forgets a closed stream, and gives its place back."""
        with self._lock:
            if stream in self._streams:
                self._streams.discard(stream)
                self._leave_locked(stream.model_name)

    def _leave_locked(self, model_name: str) -> None:
        count = self._per_model[model_name] - 1
        if count:
            self._per_model[model_name] = count
        else:
            del self._per_model[model_name]

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
