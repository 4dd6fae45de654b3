"""ProcessServable: a version loaded and served by its own process, called over a socket."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import itertools
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, final

import attrs
import numpy.typing as npt

from servinglib.errors import (
    DeadlineExceededError,
    FailedPreconditionError,
    ServingError,
    UnavailableError,
)
from servinglib.loaders.process import _wire
from servinglib.loaders.process._readable import Readable
from servinglib.loaders.process._spawn import Started, spares
from servinglib.model_calls import model_caller
from servinglib.request_extras import RequestExtras, request_extras
from servinglib.servable import (
    ExecutionMode,
    Servable,
    SignatureSpec,
    Tensors,
    answer_within,
    deadline_scope,
    request_deadline,
)

_log = logging.getLogger(__name__)

RESTART_BACKOFF_MAX_S = 60.0
"""The longest wait between attempts to load a version again after its process died."""

_MODEL_CALL_THREADS = 8  # a process's calls of other models running here at once

LOOP_CALL_MAX_BYTES = 64 * 1024
"""A call whose tensors hold more bytes (or objects) is sent from a thread, not the event loop:
its write could wait for the process to read it."""


@final
class _Pending:
    """One call's answer, filled in by whoever reads it, and the context it was made in (the
    request's: the model calls it makes from the process run in it).  ``on_done``: called
    once the answer is in (on the thread that read it)."""

    __slots__ = ("context", "done", "error", "on_done", "outputs", "reads")

    def __init__(self, on_done: Callable[[], None] | None = None) -> None:
        # what a thread's call waits on (a loop's waits on a future on_done completes): set
        # when its answer is in, or when it is handed the reading (``reads``)
        self.done = threading.Event() if on_done is None else None
        self.reads = False  # a thread's call handed the reading of answers; guarded by: _lock
        self.outputs: Any = None
        self.error: ServingError | None = None
        self.context = contextvars.copy_context()
        self.on_done = on_done

    def settle(self, outputs: Any, error: ServingError | None) -> None:  # noqa: ANN401 - the answer's payload
        self.outputs, self.error = outputs, error
        if self.done is not None:
            self.done.set()
        if self.on_done is not None:
            self.on_done()


@final
@attrs.frozen
class Request:
    """One request of :meth:`ProcessServable.execute_requests`: its tensors, the outputs it
    asks for, and its context (extras, deadline) as the process receives it.  Immutable."""

    inputs: dict[str, npt.NDArray[Any]]
    output_filter: frozenset[str] | None
    context: _wire.RequestContext
    deadline: float | None
    also_wanted: frozenset[str] = frozenset()


@final
class ProcessServable(Servable):
    """The signatures of a version that another process loaded and serves.

    :meth:`start` has a process build ``factory(path, config)`` (a Loader;
    ``factory`` is ``"module:attribute"``), load it at idle priority and
    serve it.  Each :meth:`call` blocks its thread until the process answers
    (or the request's deadline passes: DEADLINE_EXCEEDED).  If the process
    dies, its calls fail with UNAVAILABLE naming its exit status, and a new
    process loads the version again (backing off up to 60 s); calls meanwhile
    fail with UNAVAILABLE too.  :meth:`close` makes the process unload the
    version and exit.  How: architecture.md ("Loaders").
    A model the process runs may call other served models
    (:func:`~servinglib.model_calls.model_caller`, BLS): each such call comes back over the
    socket and runs here, in the context of the call that made it (its caller, deadline
    and extras), on a thread of this servable's (8 at most).
    Thread-safe: calls run concurrently (up to 8 at once in the process).
    """

    def __init__(
        self,
        started: Started,
        signatures: Mapping[str, SignatureSpec],
        load: tuple[str, str, Any, int],
    ) -> None:
        """Use :meth:`start`."""
        self._load = load  # (factory, path, config, call_threads): what a restart loads again
        self._signatures = MappingProxyType(
            {n: attrs.evolve(s, execution_mode=ExecutionMode.THREAD) for n, s in signatures.items()}
        )
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # notified when _reading turns False
        self._link = started  # the process serving; guarded by: _lock
        # the reader thread's wait on _link (None once it has ended); guarded by: _lock
        self._readable: Readable | None = Readable(started.connection.fileno())
        self._reading = False  # a thread (or a loop) reads _link's replies; guarded by: _lock
        # the event loop that reads them (its reader on _link's socket); guarded by: _lock
        self._loop_reading: asyncio.AbstractEventLoop | None = None
        self._starting: Started | None = None  # a restart's process; guarded by: _lock
        self._pending: dict[int, _Pending] = {}  # guarded by: _lock
        self._gone: ServingError | None = None  # why calls fail now; guarded by: _lock
        self._closing = threading.Event()  # set under _lock by close(); ends a restart's wait
        self._send_lock = threading.Lock()
        self._model_calls: concurrent.futures.ThreadPoolExecutor | None = None  # made at first use
        self._exit_callbacks: list[Callable[[ServingError], None]] = []  # guarded by: _lock
        name = f"servinglib-process-{started.process.pid}"
        self._reader = threading.Thread(target=self._serve_replies, name=name, daemon=True)
        self._reader.start()

    @classmethod
    def start(
        cls,
        factory: str,
        path: str,
        config: Any,  # noqa: ANN401 - the platform's config
        *,
        one_call_at_a_time: bool = False,
    ) -> ProcessServable:
        """A process (the factory's spare) loads ``factory(path, config)``; returns once it serves.

        ``one_call_at_a_time``: the process runs its calls one after another, in the order
        they were sent (an instance's: see :attr:`queues_calls`), instead of up to 8 at once.
        Raises the load's own error (its status code and message) if the
        version fails to load, UNAVAILABLE if the process exits first.  Then
        starts the factory's next spare process.
        """
        load = (factory, path, config, 1 if one_call_at_a_time else _wire.CALL_THREADS)
        started, signatures = _load_in(spares.take(factory), *load)
        return cls(started, signatures, load)

    @property
    def queues_calls(self) -> bool:
        """True when the process runs one call at a time, in the order sent: a call sent while
        another runs waits in the process's socket, and starts as soon as that one ends."""
        return self._load[3] == 1

    @property
    def pid(self) -> int:
        """The id of the process serving (a restart changes it)."""
        with self._lock:
            return self._link.process.pid

    def on_exit(self, callback: Callable[[ServingError], None]) -> None:
        """Calls ``callback(error)`` whenever the process dies (``error`` says which and how),
        before a new one loads the version: what the process held is gone (a model's state,
        a sequence's).  Called on the process's reader thread; not when it is closed."""
        with self._lock:
            self._exit_callbacks.append(callback)

    @property
    def serving(self) -> bool:
        """False while the process has died and a new one loads the version (or after close)."""
        with self._lock:
            return self._gone is None

    @property
    def signatures(self) -> Mapping[str, SignatureSpec]:
        return self._signatures

    def call(
        self, signature_name: str, inputs: Tensors, output_filter: frozenset[str] | None = None
    ) -> dict[str, npt.NDArray[Any]]:
        request = _wire.RequestContext.current()
        outputs: dict[str, npt.NDArray[Any]] = self._round_trip(
            lambda call_id: (
                _wire.CALL,
                call_id,
                signature_name,
                dict(inputs),
                output_filter,
                request,
            ),
            request_deadline(),
        )
        return outputs

    def answers_on_loop(self, inputs: Tensors) -> bool:
        """True when :meth:`call_async` of ``inputs`` runs on the event loop alone, with no
        thread: their message is small (:data:`LOOP_CALL_MAX_BYTES`, no objects), so writing
        it never waits for the process to read."""
        size = 0
        for tensor in inputs.values():
            dtype = getattr(tensor, "dtype", None)
            if dtype is None or dtype.hasobject:
                return False
            size += tensor.nbytes
        return size <= LOOP_CALL_MAX_BYTES

    async def call_async(
        self, signature_name: str, inputs: Tensors, output_filter: frozenset[str] | None = None
    ) -> dict[str, npt.NDArray[Any]]:
        """:meth:`call` for an event loop, on it: the call is sent from the loop and its answer
        read there (while no other thread reads the process's answers), so no thread waits
        for it.  Inputs :meth:`answers_on_loop` refuses go from a thread (:meth:`call`)."""
        if not self.answers_on_loop(inputs):
            return await asyncio.to_thread(self.call, signature_name, inputs, output_filter)
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        pending = _Pending(_resolver(loop, done))
        call_id = next(self._ids)
        message = (
            _wire.CALL,
            call_id,
            signature_name,
            dict(inputs),
            output_filter,
            _wire.RequestContext.current(),
        )
        deadline = request_deadline()
        link, readable = self._send_on_loop(loop, call_id, pending, message)
        try:
            await answer_within(done, deadline)
        except BaseException as error:
            with self._lock:
                self._pending.pop(call_id, None)
                idle = not self._pending and self._loop_reading is loop
            if idle:
                self._stop_loop_reading(link, readable)
            if isinstance(error, DeadlineExceededError):
                raise DeadlineExceededError(
                    f"The model process {link.process.pid} ({self._load[1]}) did not answer "
                    "before the deadline"
                ) from None
            raise
        if pending.error is not None:
            raise pending.error
        outputs: dict[str, npt.NDArray[Any]] = pending.outputs
        return outputs

    def _send_on_loop(
        self,
        loop: asyncio.AbstractEventLoop,
        call_id: int,
        pending: _Pending,
        message: tuple[Any, ...],
    ) -> tuple[Started, Readable | None]:
        """Sends ``message`` (call ``call_id``, answered to ``pending``) from ``loop``, which
        reads the answers from now on if nobody does; the process and its wait."""
        with self._lock:
            if self._gone is not None:
                raise self._gone
            self._pending[call_id] = pending
            link, readable = self._link, self._readable
            reads = not self._reading and readable is not None and readable.mute()
            if reads:
                self._reading, self._loop_reading = True, loop
        try:
            with self._send_lock:
                _wire.send(link.connection, message, small=True)
        except OSError:
            pass  # the process has gone: the reader fails this call with why
        if reads:
            assert readable is not None
            try:
                loop.add_reader(link.connection.fileno(), self._read_on_loop, link, readable)
            except (OSError, ValueError):  # closed: the process has gone, the reader says so
                self._stop_loop_reading(link, readable)
        return link, readable

    def pending(self, inputs: Tensors, output_filter: frozenset[str] | None = None) -> Request:
        """One request for :meth:`execute_requests`, made on its caller's thread (its extras
        and deadline)."""
        return self.pending_request(inputs, output_filter, request_extras(), request_deadline())

    def pending_request(
        self,
        inputs: Tensors,
        output_filter: frozenset[str] | None,
        extras: RequestExtras,
        deadline: float | None,
        *,
        also_wanted: frozenset[str] = frozenset(),
    ) -> Request:
        """One request for :meth:`execute_requests` of the request ``extras`` describes, due
        by ``deadline`` (``time.monotonic()``; None: none); ``also_wanted``: outputs the
        process's servable takes from its response beside those asked for (a sequence's
        state)."""
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        context = _wire.RequestContext(extras, timeout)
        return Request(dict(inputs), output_filter, context, deadline, also_wanted)

    def execute_requests(
        self, requests: Sequence[Request]
    ) -> list[dict[str, npt.NDArray[Any]] | ServingError]:
        """Runs ``requests`` in one ``execute_requests`` of the version's servable in the
        process (a Triton Python model's ``execute(requests)``): each one's outputs or error.

        Waits until the latest of their deadlines (DEADLINE_EXCEEDED past it, for them all).
        Raises FAILED_PRECONDITION when the servable runs one request at a time.
        """
        items = [(r.inputs, r.output_filter, r.context, r.also_wanted) for r in requests]
        deadlines = [r.deadline for r in requests]
        deadline = None if None in deadlines else max(d for d in deadlines if d is not None)
        answers: list[Any] = self._round_trip(
            lambda call_id: (_wire.REQUESTS, call_id, items), deadline
        )
        return [
            _wire.error_from(*answer) if isinstance(answer, tuple) else answer for answer in answers
        ]

    def _round_trip(self, message: Callable[[int], tuple[Any, ...]], deadline: float | None) -> Any:  # noqa: ANN401 - the answer's payload
        """Sends ``message(call_id)`` and waits for its answer until ``deadline``.

        A call reads the answers itself whenever nobody else does (the reader thread's wait
        muted meanwhile), until its own has come; it then hands the reading to the next call
        waiting on a thread, if one waits, so that each answer is read by the thread that
        waits for it rather than handed over by another.
        """
        pending = _Pending()
        done = pending.done
        assert done is not None  # (a thread's call)
        call_id = next(self._ids)
        with self._lock:
            if self._gone is not None:
                raise self._gone
            self._pending[call_id] = pending
            link, readable = self._link, self._readable
            reads = not self._reading and readable is not None and readable.mute()
            self._reading = self._reading or reads
        try:
            with self._send_lock:
                _wire.send(link.connection, message(call_id))
        except OSError:
            pass  # the process has gone: the reader fails this call with why
        while True:
            if reads:
                assert readable is not None
                self._read_own(link, readable, done, deadline)
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            answered = done.wait(timeout)
            with self._lock:
                reads, pending.reads = pending.reads, False
                if reads and call_id in self._pending:  # handed the reading, not answered
                    done.clear()
                    continue
                if reads:  # and answered meanwhile (the process has gone): passed on
                    self._pass_reading_locked(readable, done)
                if not answered:
                    self._pending.pop(call_id, None)
                    raise DeadlineExceededError(
                        f"The model process {link.process.pid} ({self._load[1]}) did not "
                        "answer before the deadline"
                    )
            break
        if pending.error is not None:
            raise pending.error
        return pending.outputs

    def close(self) -> None:
        """Makes the process unload the version and exit (killed after ``EXIT_TIMEOUT_S``).

        Idempotent.  Stops a restart in progress too.
        """
        with self._lock:
            if self._closing.is_set():
                return
            self._closing.set()  # under the lock: a restart sees it before it publishes
            self._gone = FailedPreconditionError(
                f"The model process of {self._load[1]} has been unloaded"
            )
            link, starting = self._link, self._starting
        self._release_loop_reading(link)
        status = link.stop()  # the process reads EOF: it unloads and exits
        if starting is not None:
            starting.stop()
        self._reader.join()
        link.close()
        with self._lock:
            model_calls, self._model_calls = self._model_calls, None
        if model_calls is not None:
            model_calls.shutdown(wait=False, cancel_futures=True)
        if status not in (0, None):
            _log.warning("Model process %d exited with status %s", link.process.pid, status)

    def _release_loop_reading(self, link: Started) -> None:
        """Has the event loop reading ``link`` (if one does) hand reading back to the reader
        thread, now if it no longer runs."""
        with self._lock:
            loop, readable = self._loop_reading, self._readable
        if loop is None:
            return
        if loop.is_running():
            with contextlib.suppress(RuntimeError):  # (closed meanwhile)
                loop.call_soon_threadsafe(self._stop_loop_reading, link, readable)
                return
        self._stop_loop_reading(link, readable)

    def _serve_replies(self) -> None:
        """The reader thread: answers calls; restarts the process whenever it dies."""
        with self._lock:
            link, readable = self._link, self._readable
        while readable is not None:
            self._read(link, readable)
            with self._lock:
                self._readable = None  # (callers mute it under the lock only)
            readable.close()
            status = link.process.wait()
            with self._lock:
                if self._closing.is_set():
                    return
                gone = UnavailableError(
                    f"The model process {link.process.pid} ({self._load[1]}) exited with status "
                    f"{status}; a new one is loading the version"
                )
                self._gone, pending_calls = gone, list(self._pending.values())
                self._pending.clear()
                callbacks = list(self._exit_callbacks)
            _log.error("%s", gone.message)
            for pending in pending_calls:
                pending.settle(None, gone)
            for callback in callbacks:
                try:
                    callback(gone)
                except Exception:  # noqa: BLE001 - a callback failing must not stop the restart
                    _log.exception("An exit callback of model process %d failed", link.process.pid)
            link.close()
            if not self._restart():
                return
            with self._lock:
                link, readable = self._link, self._readable

    def _read_own(
        self, link: Started, readable: Readable, done: threading.Event, deadline: float | None
    ) -> None:
        """Reads replies (and logs) until ``done`` (the call's answer has come) or ``deadline``
        passes, then hands the reading to the next call waiting on a thread, or back to the
        reader thread.  Requires: this thread set ``_reading`` (or was handed it)."""
        try:
            while not done.is_set():
                if deadline is not None and not link.connection.poll(
                    max(0.0, deadline - time.monotonic())
                ):
                    return
                self._dispatch(_wire.receive(link.connection))
        except (EOFError, OSError):
            pass  # the process has gone: the reader thread reads it too and says why
        finally:
            with self._lock:
                self._pass_reading_locked(readable, done)

    def _pass_reading_locked(self, readable: Readable | None, own: threading.Event) -> None:
        """Hands the reading of answers (this thread's, whose call waits on ``own``) to the
        first other call waiting on a thread for its answer (``_pending`` holds only calls
        not yet answered), or else back to the reader thread."""
        if self._readable is readable:  # (not a process since replaced)
            for waiting in self._pending.values():
                done = waiting.done
                if done is not None and done is not own:
                    waiting.reads = True
                    done.set()
                    return
        self._reading = False
        if readable is not None:
            readable.unmute()
        self._changed.notify_all()

    def _read_on_loop(self, link: Started, readable: Readable) -> None:
        """The event loop's reader of ``link`` (while it reads), called when it is readable:
        one message (the loop calls again while more are there); stops reading once no call
        waits (or the process has gone: the reader thread then sees that too)."""
        try:
            self._dispatch(_wire.receive(link.connection))
        except (EOFError, OSError):
            self._stop_loop_reading(link, readable)
            return
        with self._lock:
            idle = not self._pending
        if idle:
            self._stop_loop_reading(link, readable)

    def _stop_loop_reading(self, link: Started, readable: Readable | None) -> None:
        """Hands the reading of ``link`` back to the reader thread.  Requires: on the loop
        that reads it, or that loop no longer runs."""
        with self._lock:
            loop, self._loop_reading = self._loop_reading, None
            if loop is None:
                return
            if not loop.is_closed():
                with contextlib.suppress(OSError, ValueError):  # (closed: nothing to remove)
                    loop.remove_reader(link.connection.fileno())
            self._reading = False
            if readable is not None:
                readable.unmute()
            self._changed.notify_all()

    def _read(self, link: Started, readable: Readable) -> None:
        """The reader thread's reading of ``link`` until it ends (EOF), ``_reading`` left set:
        whenever it is readable and no caller reads its own answer, what has come."""
        while True:
            readable.wait()
            with self._lock:
                while self._reading:  # a caller reads (the wait returned before it muted it)
                    self._changed.wait()
                self._reading = True
            try:
                while link.connection.poll(0):
                    self._dispatch(_wire.receive(link.connection))
            except (EOFError, OSError):
                return
            with self._lock:
                self._reading = False

    def _dispatch(self, message: tuple[Any, ...]) -> None:
        """Logs a LOG; runs a MODEL_CALL; hands a reply to its call (unless its caller gave
        up)."""
        if message[0] == _wire.LOG:
            _wire.log(message)
            return
        if message[0] == _wire.MODEL_CALL:
            self._start_model_call(message)
            return
        with self._lock:
            pending = self._pending.pop(message[1], None)
        if pending is None:  # its caller gave up (deadline)
            return
        if message[0] == _wire.RESULT:
            pending.settle(message[2], None)
        else:
            pending.settle(None, _wire.error_from(message[2], message[3]))

    def _start_model_call(self, message: tuple[Any, ...]) -> None:
        """Runs a model's call of another model (a MODEL_CALL) on a thread, in the context
        of the call that made it, and sends its answer to the process."""
        _, nested_id, parent_id, model_name, inputs, options, timeout_s, awaited = message
        with self._lock:
            parent = self._pending.get(parent_id)
            link = self._link
            if self._model_calls is None:
                self._model_calls = concurrent.futures.ThreadPoolExecutor(
                    _MODEL_CALL_THREADS, thread_name_prefix="servinglib-model-call"
                )
            threads = self._model_calls
        if parent is None:  # its call has ended (or given up): nobody waits for the answer
            error = FailedPreconditionError("The call that made this model call has ended")
            self._answer_model_call(link, (_wire.ERROR, nested_id, *_wire.error_fields(error)))
            return

        def run() -> None:
            deadline = request_deadline()  # the request's, unless the process asks for less
            if timeout_s is not None:
                deadline = min(d for d in (deadline, time.monotonic() + timeout_s) if d is not None)
            try:
                with deadline_scope(deadline):
                    caller = model_caller()
                    if awaited:  # on a loop of this thread's: the deadline cuts the wait off
                        outputs = asyncio.run(caller.call_async(model_name, inputs, **options))
                    else:
                        outputs = caller.call(model_name, inputs, **options)
                reply: tuple[Any, ...] = (_wire.RESULT, nested_id, outputs)
            except Exception as error:  # noqa: BLE001 - the callee's error is the answer
                reply = (_wire.ERROR, nested_id, *_wire.error_fields(error))
            self._answer_model_call(link, reply)

        threads.submit(parent.context.copy().run, run)  # (a context runs on one thread at once)

    def _answer_model_call(self, link: Started, reply: tuple[Any, ...]) -> None:
        try:
            with self._send_lock:
                _wire.send(link.connection, reply)
        except OSError:
            pass  # the process has gone: the call waiting in it has gone with it

    def _restart(self) -> bool:
        """Loads the version in a new process, retrying with backoff; False once closed."""
        delay = 0.0
        while not self._closing.wait(delay):
            delay = min(RESTART_BACKOFF_MAX_S, max(1.0, delay * 2))
            starting = spares.take(self._load[0])  # (a fork: not under the lock calls take)
            with self._lock:
                closing = self._closing.is_set()
                if not closing:
                    self._starting = starting
            if closing:
                starting.stop()
                starting.close()
                return False
            try:
                started, _ = _load_in(starting, *self._load)
            except ServingError as error:
                _log.error(
                    "Model process for %s: reloading failed: %s", self._load[1], error.message
                )
                continue
            finally:
                with self._lock:
                    self._starting = None
            with self._lock:
                if self._closing.is_set():
                    started.stop()
                    started.close()
                    return False
                self._link, self._gone = started, None
                self._readable, self._reading = Readable(started.connection.fileno()), False
            _log.info("Model process %d serves %s again", started.process.pid, self._load[1])
            return True
        return False


def _resolver(loop: asyncio.AbstractEventLoop, done: asyncio.Future[None]) -> Callable[[], None]:
    """What completes ``done`` (on ``loop``, this thread's) from any thread."""
    loop_thread = threading.get_ident()

    def resolve() -> None:
        if loop.is_closed():
            return  # nobody waits
        if threading.get_ident() == loop_thread:
            _resolve(done)
        else:
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
                loop.call_soon_threadsafe(_resolve, done)

    return resolve


def _resolve(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)


def _load_in(
    started: Started,
    factory: str,
    path: str,
    config: Any,  # noqa: ANN401 - the platform's config
    call_threads: int,
) -> tuple[Started, dict[str, SignatureSpec]]:
    """Has ``started`` load ``factory(path, config)``, to run ``call_threads`` calls at once:
    it and the signatures, or the load's error.

    Starts the factory's next spare process either way.
    """
    try:
        _wire.send(started.connection, (_wire.LOAD, path, config, call_threads))
        reply = _wire.receive_reply(started.connection)
    except (EOFError, OSError):
        reply = (_wire.FAILED, None, "")
    except BaseException:
        started.stop()
        started.close()
        raise
    finally:
        spares.refill(factory)
    if reply[0] == _wire.FAILED:
        status = started.stop()
        started.close()
        if reply[1] is None:
            raise UnavailableError(
                f"Model process {started.process.pid} ({path}) exited with status {status}"
            )
        raise _wire.error_from(reply[1], reply[2])
    return started, reply[1]
