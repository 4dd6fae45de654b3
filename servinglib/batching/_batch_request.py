"""One caller's batched request and how its result gets back to it."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from typing import Any, final

import numpy as np
import numpy.typing as npt

from servinglib.errors import DeadlineExceededError, ServingError
from servinglib.servable import CallStages, Tensors

Outputs = dict[str, npt.NDArray[Any]]


@final
class BatchRequest:
    """One caller's request: its inputs, its future, and the pieces of its result so far.

    The future is an asyncio future of the caller's loop (``call_async``) or
    a concurrent one (``call``).  Batch threads never touch an asyncio
    future themselves: they settle a whole batch's worth of them with one
    ``call_soon_threadsafe`` per loop (:class:`Settlements`).
    """

    __slots__ = (
        "_lock",
        "_pieces",
        "_remaining",
        "_settled",
        "deadline",
        "future",
        "inputs",
        "loop",
        "output_filter",
        "size",
        "stages",
    )

    def __init__(
        self,
        inputs: Tensors,
        output_filter: frozenset[str] | None,
        size: int,
        deadline: float | None,
        loop: asyncio.AbstractEventLoop | None,
        *,
        stages: CallStages | None = None,
    ) -> None:
        self.inputs = inputs
        self.stages = stages  # the caller's timing record, filled by the batch that runs it
        self.output_filter = output_filter
        self.size = size
        self.deadline = deadline
        self.loop = loop
        self.future: asyncio.Future[Outputs] | concurrent.futures.Future[Outputs] = (
            loop.create_future() if loop is not None else concurrent.futures.Future()
        )
        self._lock = threading.Lock()
        self._pieces: list[tuple[int, Outputs]] = []  # guarded by: _lock
        self._remaining = size  # guarded by: _lock
        self._settled = False  # guarded by: _lock

    def live(self, now: float, settlements: Settlements) -> bool:
        """Whether a batch should run this request's rows (not cancelled, failed or expired)."""
        if self.future.cancelled():
            return False
        if self.deadline is not None and now >= self.deadline:
            self.fail(
                DeadlineExceededError("Deadline exceeded while waiting in the batch queue"),
                settlements,
            )
            return False
        with self._lock:
            return not self._settled

    def deliver(self, start: int, size: int, piece: Outputs, settlements: Settlements) -> None:
        """Adds rows [start, start + size) of the result; settles the request when all are in."""
        wanted = self.output_filter
        if wanted is not None:
            piece = {name: value for name, value in piece.items() if name in wanted}
        with self._lock:
            if self._settled:
                return
            self._pieces.append((start, piece))
            self._remaining -= size
            if self._remaining > 0:
                return
            self._settled = True
            pieces = sorted(self._pieces, key=lambda item: item[0])
            self._pieces = []
        if len(pieces) == 1:
            result = pieces[0][1]
        else:
            names = pieces[0][1].keys()
            result = {name: np.concatenate([p[name] for _, p in pieces], axis=0) for name in names}
        settlements.add(self, result, None)

    def fail(self, error: ServingError, settlements: Settlements | None = None) -> None:
        """Settles the request with ``error`` unless it is settled already."""
        with self._lock:
            if self._settled:
                return
            self._settled = True
            self._pieces = []
        if settlements is not None:
            settlements.add(self, None, error)
        else:
            _settle([(self, None, error)])


Settlement = tuple[BatchRequest, "Outputs | None", "ServingError | None"]


@final
class Settlements:
    """The requests a batch settled, handed to their event loops in one call per loop."""

    __slots__ = ("_by_loop",)

    def __init__(self) -> None:
        self._by_loop: dict[asyncio.AbstractEventLoop | None, list[Settlement]] = {}

    def add(
        self, request: BatchRequest, outputs: Outputs | None, error: ServingError | None
    ) -> None:
        self._by_loop.setdefault(request.loop, []).append((request, outputs, error))

    def flush(self) -> None:
        by_loop, self._by_loop = self._by_loop, {}
        for items in by_loop.values():
            _settle(items)


def _settle(items: list[Settlement]) -> None:
    loop = items[0][0].loop
    if loop is None:
        _resolve(items)
        return
    with contextlib.suppress(RuntimeError):  # a closed loop: no one is waiting any more
        loop.call_soon_threadsafe(_resolve, items)


def _resolve(items: list[Settlement]) -> None:
    """Sets each future (on its loop's thread for asyncio futures); skips cancelled ones."""
    for request, outputs, error in items:
        future = request.future
        if future.done():
            continue
        if (
            isinstance(future, concurrent.futures.Future)
            and not future.set_running_or_notify_cancel()
        ):
            continue
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(outputs)  # type: ignore[arg-type]
