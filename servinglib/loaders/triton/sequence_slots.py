"""Which sequences a sequence model serves now: the slots of its instances and the backlog.

:class:`SequenceSlots` is the sequence batcher's table (state only, no threads, no clock of
its own): a sequence started by a request with ``sequence_start`` takes a free slot of the
instance with the most free slots, or waits in the backlog; it keeps its slot, and so its
instance, until its END request has run or it has been idle too long; a freed slot goes to
the oldest sequence of the backlog.  Requests of a sequence wait in its own queue, in
arrival order.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import Any, final

from servinglib.errors import InvalidArgumentError, UnavailableError
from servinglib.servable import Tensors


@final
class SequenceRequest:
    """One request of a sequence, waiting in its queue.  Not thread-safe (the table's lock)."""

    __slots__ = ("arrived", "call", "end", "start")

    def __init__(self, call: Any, *, start: bool, end: bool, arrived: float) -> None:  # noqa: ANN401 - the batcher's own call record
        self.call = call
        self.start = start
        self.end = end
        self.arrived = arrived


@final
class Sequence:
    """An active sequence: its id, slot, queued requests and state.

    ``instance`` and ``slot`` are None while it waits in the backlog; ``state`` is what the
    model's last request of it left (None: its initial state).  Not thread-safe: guarded by
    the lock of the table that holds it.
    """

    __slots__ = (
        "correlation_id",
        "expects_start",
        "idle_since",
        "instance",
        "lost",
        "requests",
        "restart",
        "running",
        "slot",
        "state",
    )

    def __init__(self, correlation_id: int | str, now: float) -> None:
        self.correlation_id = correlation_id
        self.instance: int | None = None
        self.slot: int | None = None
        self.requests: collections.deque[SequenceRequest] = collections.deque()
        self.state: Tensors | None = None
        self.running = False  # a request of it is in the model
        self.expects_start = False  # its last queued request ends it
        self.restart = False  # a skipped START: the next request it runs starts it
        self.idle_since = now
        self.lost = False  # its instance died while it ran: it ends when that batch returns


@final
class SequenceSlots:
    """The slots of ``instances`` instances (``slots`` each) and the backlog of sequences.

    Not thread-safe: the caller holds one lock around every call.
    """

    def __init__(self, model_name: str, instances: int, slots: int, max_backlog: int) -> None:
        self._model = model_name
        self._max_backlog = max_backlog
        self._slots: list[list[Sequence | None]] = [[None] * slots for _ in range(instances)]
        self._sequences: dict[int | str, Sequence] = {}
        self._backlog: collections.deque[Sequence] = collections.deque()

    @property
    def active(self) -> int:
        """Sequences that hold a slot or wait in the backlog."""
        return len(self._sequences)

    @property
    def backlog(self) -> int:
        """Sequences waiting for a slot."""
        return len(self._backlog)

    @property
    def slots(self) -> int:
        """The slots of all instances."""
        return sum(len(slots) for slots in self._slots)

    def enqueue(self, correlation_id: int | str, request: SequenceRequest) -> Sequence:
        """Queues ``request`` behind the earlier ones of its sequence; its sequence.

        A request with ``start`` starts its sequence (a new one, or again after the requests
        queued before it).  Raises InvalidArgumentError for a request without ``start`` of a
        sequence that is not active, or whose last queued request ends it, and
        UnavailableError for a new sequence when the backlog is full.
        """
        sequence = self._sequences.get(correlation_id)
        if not request.start and (sequence is None or sequence.expects_start):
            raise InvalidArgumentError(
                f"inference request for sequence {_shown(correlation_id)} to model "
                f"'{self._model}' must specify the START flag on the first request of the "
                "sequence: the sequence is not active (never started, ended, or idle longer "
                "than max_sequence_idle_microseconds)"
            )
        if sequence is None:
            sequence = Sequence(correlation_id, request.arrived)
            if not self._place(sequence):
                if self._max_backlog and len(self._backlog) >= self._max_backlog:
                    raise UnavailableError(
                        f"Model '{self._model}': {len(self._backlog)} sequences wait for a slot "
                        f"already (MAX_SEQUENCE_BACKLOG); sequence {_shown(correlation_id)} "
                        "cannot start now"
                    )
                self._backlog.append(sequence)
            self._sequences[correlation_id] = sequence
        sequence.requests.append(request)
        sequence.expects_start = request.end
        sequence.idle_since = request.arrived
        return sequence

    def in_slots(self, instance: int) -> Iterator[Sequence]:
        """The sequences holding a slot of ``instance``, by slot."""
        return (sequence for sequence in self._slots[instance] if sequence is not None)

    def occupied(self, instance: int) -> int:
        """How many slots of ``instance`` hold a sequence."""
        return sum(sequence is not None for sequence in self._slots[instance])

    def end(self, sequence: Sequence) -> None:
        """Ends ``sequence``: drops it and its state, and gives its slot to the backlog's
        oldest sequence.  Requires: ``sequence`` holds a slot, runs nothing, queues nothing."""
        del self._sequences[sequence.correlation_id]
        instance, slot = sequence.instance, sequence.slot
        assert instance is not None, "a backlogged sequence never ends"
        assert slot is not None
        self._slots[instance][slot] = None
        if self._backlog:
            waiting = self._backlog.popleft()
            self._slots[instance][slot] = waiting
            waiting.instance, waiting.slot = instance, slot

    def idle(self, now: float, idle_s: float) -> list[Sequence]:
        """The sequences holding a slot that have run and queued nothing for ``idle_s``."""
        return [
            sequence
            for row in self._slots
            for sequence in row
            if sequence is not None
            and not sequence.requests
            and not sequence.running
            and now - sequence.idle_since >= idle_s
        ]

    def next_idle_at(self, idle_s: float) -> float | None:
        """When the next sequence holding a slot becomes idle, if nothing comes for it."""
        times = [
            sequence.idle_since + idle_s
            for row in self._slots
            for sequence in row
            if sequence is not None and not sequence.requests and not sequence.running
        ]
        return min(times, default=None)

    def _place(self, sequence: Sequence) -> bool:
        free = [row.count(None) for row in self._slots]
        instance = max(range(len(free)), key=free.__getitem__)
        if not free[instance]:
            return False
        slot = self._slots[instance].index(None)
        self._slots[instance][slot] = sequence
        sequence.instance, sequence.slot = instance, slot
        return True


def _shown(correlation_id: int | str) -> str:
    return str(correlation_id) if isinstance(correlation_id, int) else repr(correlation_id[:80])
