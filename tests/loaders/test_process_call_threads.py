"""CallThreads: a model process's calls run on the thread that read them, several at once."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

from servinglib.loaders.process._call_threads import CallThreads, Message
from servinglib.testing import wait_until

TIMEOUT_S = 30


class _Messages:
    """A receive() fed by the test: each message a callable run as the call; None ends it."""

    def __init__(self) -> None:
        self.queue: queue.Queue[Message | None] = queue.Queue()
        self.readers: list[str] = []

    def receive(self) -> Message:
        message = self.queue.get(timeout=TIMEOUT_S)
        if message is None:
            raise EOFError
        self.readers.append(threading.current_thread().name)
        return message

    def send(self, work: Callable[[], None]) -> None:
        self.queue.put((work,))


def _dispatch(message: Message) -> Callable[[], None] | None:
    work: Any = message[0]
    return work


def _serving(messages: _Messages, max_threads: int) -> threading.Thread:
    threads = CallThreads(messages.receive, _dispatch, max_threads, "test-call")
    serving = threading.Thread(target=threads.serve, name="serving")
    serving.start()
    return serving


def test_a_call_runs_on_the_thread_that_read_it() -> None:
    """The first call runs on the thread that read it (no hand-over before it starts)."""
    messages = _Messages()
    ran_on: list[str] = []
    done = threading.Event()
    serving = _serving(messages, 8)
    messages.send(lambda: (ran_on.append(threading.current_thread().name), done.set()))
    assert done.wait(TIMEOUT_S)
    messages.queue.put(None)
    serving.join(TIMEOUT_S)
    assert ran_on == [messages.readers[0]] == ["serving"]


def test_a_call_read_while_another_runs_runs_at_once() -> None:
    """Calls read while others run start beside them, up to max_threads at once."""
    messages = _Messages()
    meet = threading.Barrier(4, timeout=TIMEOUT_S)
    met: list[str] = []
    serving = _serving(messages, 4)
    for _ in range(4):
        messages.send(lambda: (meet.wait(), met.append(threading.current_thread().name)))
    messages.queue.put(None)
    serving.join(TIMEOUT_S)
    assert not serving.is_alive()
    assert len(set(met)) == 4  # all four ran at once, each on its own thread


def test_with_every_thread_busy_the_next_message_waits_unread() -> None:
    """A message is read only once one of the max_threads threads is free again."""
    messages = _Messages()
    release = threading.Event()
    both_run = threading.Barrier(3, timeout=TIMEOUT_S)
    third_ran = threading.Event()
    serving = _serving(messages, 2)
    for _ in range(2):
        messages.send(lambda: (both_run.wait(), release.wait(TIMEOUT_S)))
    both_run.wait()
    messages.send(third_ran.set)
    assert messages.queue.qsize() == 1  # both threads run a call: nobody reads
    assert len(messages.readers) == 2
    release.set()
    assert third_ran.wait(TIMEOUT_S)
    messages.queue.put(None)
    serving.join(TIMEOUT_S)
    assert not serving.is_alive()


def test_serve_returns_once_the_running_calls_have_ended() -> None:
    """Reading ends at EOF, but serve() waits for the calls still running."""
    messages = _Messages()
    running = threading.Event()
    release = threading.Event()
    serving = _serving(messages, 8)
    messages.send(lambda: (running.set(), release.wait(TIMEOUT_S)))
    assert running.wait(TIMEOUT_S)
    messages.queue.put(None)
    serving.join(0.2)
    assert serving.is_alive()
    release.set()
    serving.join(TIMEOUT_S)
    assert not serving.is_alive()


def test_calls_one_at_a_time_use_at_most_two_threads() -> None:
    """Sequential calls take turns on the reader and one follower: no thread per call.

    Each call is sent once the thread that ran the last one waits to read again (its call
    signals the test before that thread has gone back: a call sent sooner finds no idle
    thread and rightly starts one)."""
    messages = _Messages()
    threads = CallThreads(messages.receive, _dispatch, 8, "test-call")
    serving = threading.Thread(target=threads.serve, name="serving")
    serving.start()
    names: set[str] = set()
    for _ in range(50):
        done = threading.Event()
        messages.send(lambda done=done: (names.add(threading.current_thread().name), done.set()))
        assert done.wait(TIMEOUT_S)
        wait_until(lambda: threads._idle == 1, TIMEOUT_S)  # it waits, the other reads
    messages.queue.put(None)
    serving.join(TIMEOUT_S)
    assert len(names | set(messages.readers)) <= 2


def _one_thread(messages: _Messages) -> tuple[CallThreads, threading.Thread]:
    """CallThreads of one thread at most, serving ``messages`` on a thread of their own."""
    threads = CallThreads(messages.receive, _dispatch, 1, "test-call")
    serving = threading.Thread(target=threads.serve, name="serving")
    serving.start()
    return threads, serving


def _end(messages: _Messages, serving: threading.Thread) -> None:
    messages.queue.put(None)
    serving.join(TIMEOUT_S)
    assert not serving.is_alive()


def test_a_call_waiting_for_a_message_has_one_read_past_max_threads() -> None:
    """With every thread running a call, a call that waits for a message (a model call's
    answer) in reading_meanwhile: a thread past max_threads reads it, where none would."""
    messages = _Messages()
    answered = threading.Event()
    done = threading.Event()
    threads, serving = _one_thread(messages)

    def waits_for_an_answer() -> None:
        with threads.reading_meanwhile():
            messages.send(answered.set)  # the answer, read (and run) only by another thread
            if answered.wait(TIMEOUT_S):
                done.set()

    messages.send(waits_for_an_answer)
    assert done.wait(TIMEOUT_S)
    _end(messages, serving)


def test_a_call_read_while_another_waits_for_an_answer_leaves_a_reader() -> None:
    """One call waits for an answer; the thread reading for it reads another call first, which
    blocks (an instance's execute waits for the first to end): a further thread reads the
    answer, where the one reader, now running that call, could not."""
    messages = _Messages()
    answered = threading.Event()
    first_ended = threading.Event()
    done = threading.Event()
    threads, serving = _one_thread(messages)

    def waits_for_an_answer() -> None:
        with threads.reading_meanwhile():
            messages.send(lambda: first_ended.wait(TIMEOUT_S))  # a call waiting for this one
            messages.send(answered.set)  # then the answer
            answered.wait(TIMEOUT_S)
        first_ended.set()
        done.set()

    messages.send(waits_for_an_answer)
    assert done.wait(TIMEOUT_S)
    assert answered.is_set()
    _end(messages, serving)
