"""The threads of a model process that read its calls and run them (leader/followers)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any, final

Message = tuple[Any, ...]


@final
class CallThreads:
    """Up to ``max_threads`` threads take turns reading messages and run the calls they read.

    One thread at a time (the leader) reads with ``receive()``; ``dispatch(message)`` says
    what to run for it on a thread (None: nothing, it went elsewhere, and the leader reads
    on).  Before running a call, the leader hands reading to an idle thread (starting one
    while there are fewer than ``max_threads``), so a call runs on the thread that read it,
    with no hand-over before it starts, and a call read meanwhile runs at once beside it.
    With every thread running a call, messages wait unread until one ends.  ``receive``
    raising EOFError or OSError ends the reading; :meth:`serve` returns once every call
    has ended.
    Thread-safe.
    """

    def __init__(
        self,
        receive: Callable[[], Message],
        dispatch: Callable[[Message], Callable[[], None] | None],
        max_threads: int,
        name: str,
    ) -> None:
        self._receive = receive
        self._dispatch = dispatch
        self._max_threads = max_threads
        self._name = name
        self._changed = threading.Condition()
        self._leading = False  # a thread reads; guarded by: _changed
        self._idle = 0  # threads waiting to read; guarded by: _changed
        self._threads: list[threading.Thread] = []  # started here; guarded by: _changed
        self._ended = False  # reading has ended; guarded by: _changed
        self._answer_waits = 0  # calls waiting for a message; guarded by: _changed

    def serve(self) -> None:
        """Reads and runs calls on this thread and others until reading ends and they have run."""
        self._take_turns()
        with self._changed:
            threads = list(self._threads)  # (none starts once reading has ended)
        for thread in threads:
            thread.join()

    @contextlib.contextmanager
    def reading_meanwhile(self) -> Iterator[None]:
        """For a call's thread waiting, in the ``with`` block, for a message (the answer of a
        call it made): makes sure a thread reads meanwhile, whatever the other threads read
        and run, starting one past ``max_threads`` whenever every thread runs a call (each
        extra thread is one running call: bounded by the calls)."""
        with self._changed:
            self._answer_waits += 1
            if not (self._leading or self._idle or self._ended):
                self._start_locked()
        try:
            yield
        finally:
            with self._changed:
                self._answer_waits -= 1

    def _take_turns(self) -> None:
        while self._lead():
            work = self._read()
            if work is None:
                return
            self._hand_over()
            work()

    def _lead(self) -> bool:
        """Waits to be the thread that reads; False once reading has ended."""
        with self._changed:
            self._idle += 1
            while self._leading and not self._ended:
                self._changed.wait()
            self._idle -= 1
            if self._ended:
                return False
            self._leading = True
            return True

    def _read(self) -> Callable[[], None] | None:
        """The next call's work (read as the leader); None once reading has ended."""
        while True:
            try:
                message = self._receive()
            except (EOFError, OSError):
                with self._changed:
                    self._ended, self._leading = True, False
                    self._changed.notify_all()
                return None
            work = self._dispatch(message)
            if work is not None:
                return work

    def _hand_over(self) -> None:
        with self._changed:
            self._leading = False
            if self._idle:
                self._changed.notify()
            elif len(self._threads) + 1 < self._max_threads or self._answer_waits:
                self._start_locked()  # (a call waits for an answer: one must read on)

    def _start_locked(self) -> None:
        thread = threading.Thread(
            target=self._take_turns, name=f"{self._name}_{len(self._threads)}", daemon=True
        )
        self._threads.append(thread)
        thread.start()
