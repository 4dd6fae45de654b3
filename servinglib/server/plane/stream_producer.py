"""The producer of a streaming signature's parts: the model's iterator, driven where it runs."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, Final, final

from servinglib.servable import CallSite, ExecutionMode, SignatureSpec, checked_part
from servinglib.server.plane.call_pool import CallPool
from servinglib.server.plane.stream_budget import StreamBudget, part_bytes
from servinglib.server.plane.streaming import DEFAULT_BUFFER_PARTS, Part

Produce = Callable[[Callable[[Part], Awaitable[None]], Callable[[], int]], Awaitable[None]]
"""Makes a stream's parts, handing each to the callback it is given (which waits for room);
the second callback says how many places the stream's buffer has free."""


def stream_producer(
    pool: CallPool,
    site: CallSite,
    spec: SignatureSpec,
    parts: Iterator[Any] | AsyncIterator[Any],
    *,
    wanted: frozenset[str] | None,
    deadline: float | None,
    batch_parts: int = DEFAULT_BUFFER_PARTS,
    budget: StreamBudget | None = None,
) -> Produce:
    """What produces a streaming signature's parts (``start_stream``'s iterator) into a stream.

    Each part is checked (:func:`checked_part`).  A THREAD iterator makes its
    first part alone on a worker, then up to ``batch_parts`` per pool call
    (within the buffer's room and ``budget``).  Whatever ends the production
    (its end, an error, cancellation) closes the iterator first.
    """
    name = site.signature_name

    if isinstance(parts, AsyncIterator):
        async_parts = parts

        async def produce_async(
            put: Callable[[Part], Awaitable[None]], _room: Callable[[], int]
        ) -> None:
            try:
                async for part in async_parts:
                    await put(checked_part(name, spec, wanted, part))
            finally:
                aclose = getattr(async_parts, "aclose", None)
                if aclose is not None:
                    await aclose()

        return produce_async

    stepper = _Stepper(parts, budget)
    inline = spec.execution_mode is ExecutionMode.INLINE

    async def produce(put: Callable[[Part], Awaitable[None]], room: Callable[[], int]) -> None:
        try:
            if inline:
                while (part := stepper.step()) is not _END:
                    await put(checked_part(name, spec, wanted, part))
                return
            limit = 1  # the first part alone, as soon as it is made; then up to a buffer's worth
            while True:
                batch = await pool.submit(site, deadline, _nothing, stepper.steps, limit)
                for part in batch["parts"]:
                    await put(checked_part(name, spec, wanted, part))
                if batch["error"] is not None:
                    raise batch["error"]
                if batch["end"]:
                    return
                limit = max(1, min(batch_parts, room()))
        finally:
            if inline:
                stepper.close()
            elif not stepper.exhausted:
                # Off the loop: a next() still running on a worker (its request gave up) is
                # waited for, and the iterator's finally may block.
                await asyncio.shield(asyncio.to_thread(stepper.close))

    return produce


_END: Final[Part] = {}
_BATCH_S: Final = 0.001
"""A pool call making several parts hands them over after at most about this long."""


def _nothing() -> None:
    pass


@final
class _Stepper:
    """Advances a sync iterator one part per call, from any thread; closes it once.

    ``next()`` and ``close()`` never overlap (a generator refuses that),
    and close waits for a ``next()`` still running.  Thread-safe.
    """

    def __init__(self, parts: Iterator[Any], budget: StreamBudget | None = None) -> None:
        self._parts = parts
        self._budget = budget
        self._lock = threading.Lock()
        self.exhausted = False  # guarded by: _lock (read racily: only to skip a needless close)

    def steps(self, limit: int) -> dict[str, Any]:
        """Up to ``limit`` parts, fewer if making them takes over :data:`_BATCH_S`
        or their bytes would fill the stream budget's room.

        A dict (what a pool call returns): ``parts``, ``end`` (the iterator
        ended), ``error`` (what its ``next()`` raised after those parts, or None).
        """
        parts: list[Part] = []
        made_bytes = 0
        started = time.monotonic()
        try:
            while len(parts) < limit:
                part = self.step()
                if part is _END:
                    return {"parts": parts, "end": True, "error": None}
                parts.append(part)
                if time.monotonic() - started > _BATCH_S:
                    break
                if self._budget is not None:
                    made_bytes += part_bytes(part)
                    if not self._budget.has_room(made_bytes):
                        break
        except Exception as error:  # noqa: BLE001 - delivered after the parts made before it
            return {"parts": parts, "end": True, "error": error}
        return {"parts": parts, "end": False, "error": None}

    def step(self) -> Part:
        with self._lock:
            if self.exhausted:
                return _END
            try:
                part: Part = next(self._parts)
            except StopIteration:
                self.exhausted = True
                return _END
            except BaseException:
                self.exhausted = True
                raise
            return part

    def close(self) -> None:
        with self._lock:
            self.exhausted = True
            close = getattr(self._parts, "close", None)
            if close is not None:
                close()
