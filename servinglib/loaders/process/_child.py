"""A model process: ``python -m servinglib.loaders.process._child FD`` serves one version."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from multiprocessing.connection import Connection
from typing import Any

from servinglib.core.loader import Loader
from servinglib.errors import FailedPreconditionError, ServingError, UnimplementedError
from servinglib.loaders.model_loader import ModelLoader
from servinglib.loaders.process import _wire
from servinglib.loaders.process._call_threads import CallThreads
from servinglib.loaders.process._priority import lower_this_thread, run_idle
from servinglib.loaders.process._server_caller import ServerCaller
from servinglib.servable import (
    ExecutionMode,
    Servable,
    Tensors,
    deadline_exceeded,
    request_deadline,
)

_log = logging.getLogger("servinglib.model_process")


def main(argv: list[str]) -> int:
    """Serves one version over the socket whose descriptor is ``argv[0]``; the exit status."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the server's to handle
    connection = Connection(int(argv[0]))
    root = logging.getLogger()
    root.addHandler(_ToServer(connection))
    root.setLevel(logging.INFO)
    try:
        kind, factory, sys_path = _wire.receive(connection)
        assert kind == _wire.PREPARE, kind
        sys.path[:] = sys_path
        try:
            make: Any = run_idle(lambda: _prepare(factory))
            error: BaseException | None = None
        except BaseException as failure:  # noqa: BLE001 - the load's answer, once asked
            error = failure
        kind, path, config, call_threads = _wire.receive(connection)
        assert kind == _wire.LOAD, kind
    except (EOFError, OSError):  # a spare the server no longer wants
        return 0
    try:
        if error is not None:
            raise error
        loader = _load(make, path, config)
    except BaseException as failure:  # noqa: BLE001 - every failure is the load's answer
        _send(connection, (_wire.FAILED, *_wire.error_fields(failure)))
        return 1
    servable = loader.servable()
    try:
        _send(connection, (_wire.LOADED, dict(servable.signatures)))
    except OSError:  # the server went away meanwhile: nothing to serve
        run_idle(loader.unload)
        return 0
    _serve(connection, servable, call_threads)
    run_idle(loader.unload)
    return 0


_send_lock = threading.Lock()  # one message at a time on the connection


def _send(connection: Connection, message: tuple[Any, ...]) -> None:
    with _send_lock:
        _wire.send(connection, message)


class _ToServer(logging.Handler):
    """Sends each log record to the server, which logs it as its own (see ``_wire.LOG``)."""

    def __init__(self, connection: Connection) -> None:
        super().__init__()
        self._connection = connection

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(OSError):  # the server has gone: nobody to tell
            _send(self._connection, (_wire.LOG, _wire.log_fields(record, os.getpid())))


def _prepare(factory: str) -> Any:  # noqa: ANN401 - a Loader class or function
    """Imports ``factory`` ("module:attribute") and, for a ModelLoader, its runtime."""
    module_name, _, attribute = factory.partition(":")
    make = getattr(importlib.import_module(module_name), attribute)
    if isinstance(make, type) and issubclass(make, ModelLoader):
        make.import_runtime()
    return make


def _load(make: Any, path: str, config: Any) -> Loader:  # noqa: ANN401 - a factory; a config
    loader: Loader = run_idle(lambda: make(path, config))
    if isinstance(loader, ModelLoader):
        loader.start_runtime()  # at normal priority: the threads it starts serve the calls
    run_idle(loader.load)
    streaming = [n for n, s in loader.servable().signatures.items() if s.streaming]
    if streaming:
        run_idle(loader.unload)
        raise UnimplementedError(
            f"Streaming signatures cannot run in a model process: {', '.join(sorted(streaming))}"
        )
    return loader


def _serve(connection: Connection, servable: Servable, call_threads: int) -> None:
    """Runs each CALL: ``thread`` and ``inline`` ones on the thread that read it (see
    :class:`CallThreads`, ``call_threads`` at once), ``async`` ones on an event loop."""
    modes = {name: spec.execution_mode for name, spec in servable.signatures.items()}
    loop: asyncio.AbstractEventLoop | None = None
    if ExecutionMode.ASYNC in modes.values():
        loop = asyncio.new_event_loop()
        threading.Thread(target=loop.run_forever, name="servinglib-loop", daemon=True).start()

    def answer(call_id: int, work: Callable[[], Any]) -> None:
        try:
            reply: tuple[Any, ...] = (_wire.RESULT, call_id, work())
        except BaseException as error:  # noqa: BLE001 - every failure is the call's answer
            reply = (_wire.ERROR, call_id, *_wire.error_fields(error))
        with contextlib.suppress(OSError):  # OSError: the server has gone
            _send(connection, reply)

    def dispatch(message: tuple[Any, ...]) -> Callable[[], None] | None:
        if message[0] in {_wire.RESULT, _wire.ERROR}:  # the answer of a model call made here
            caller.answered(message)
            return None
        if message[0] == _wire.REQUESTS:
            _, call_id, requests = message
            work = functools.partial(_execute, servable, requests)
            return functools.partial(answer, call_id, caller.within(call_id, work))
        kind, call_id, name, inputs, output_filter, request = message
        assert kind == _wire.CALL, kind
        if loop is not None and modes.get(name) is ExecutionMode.ASYNC:
            with request.scope(), caller.scope(call_id):  # the coroutine's context copies these
                coroutine = servable.call_async(name, inputs, output_filter)
                future = asyncio.run_coroutine_threadsafe(coroutine, loop)
            future.add_done_callback(functools.partial(_answer_with, answer, call_id))
            return None
        call = functools.partial(_call, servable, name, inputs, output_filter, request)
        return functools.partial(answer, call_id, caller.within(call_id, call))

    def receive() -> tuple[Any, ...]:
        try:
            return _wire.receive(connection)
        except (EOFError, OSError):
            caller.end()  # the server has gone: the model calls waiting get no answer
            raise

    threads = CallThreads(receive, dispatch, call_threads, "servinglib-call")
    caller = ServerCaller(functools.partial(_send, connection), threads.reading_meanwhile)
    threads.serve()
    lower_this_thread()  # the unload and the exit's freeing of memory: at idle priority too


def _call(
    servable: Servable,
    name: str,
    inputs: Tensors,
    output_filter: frozenset[str] | None,
    request: _wire.RequestContext,
) -> Any:  # noqa: ANN401 - the signature's outputs
    with request.scope():
        deadline = request_deadline()
        if deadline is not None and deadline <= time.monotonic():  # it waited unread too long
            raise deadline_exceeded()
        return servable.call(name, inputs, output_filter)


def _execute(
    servable: Servable, requests: list[tuple[Tensors, frozenset[str] | None, Any, frozenset[str]]]
) -> list[Any]:
    """A REQUESTS message's answers: the servable's ``execute_requests`` of them all (a
    :class:`~servinglib.loaders.triton.request_batching.RequestExecutor`), each request's
    outputs or its error as ``(code, message)``."""
    executor: Any = servable
    if not hasattr(executor, "execute_requests"):
        raise FailedPreconditionError(
            f"{type(servable).__name__} cannot run several requests in one call"
        )
    pending = []
    for inputs, output_filter, request, also_wanted in requests:
        if also_wanted:  # (a sequence step: its state's outputs too)
            deadline = None if request.timeout_s is None else time.monotonic() + request.timeout_s
            pending.append(
                executor.pending_request(
                    inputs, output_filter, request.extras, deadline, also_wanted=also_wanted
                )
            )
            continue
        with request.scope():  # each request's record holds its own extras and deadline
            pending.append(executor.pending(inputs, output_filter))
    outcomes = executor.execute_requests(pending)
    return [
        _wire.error_fields(outcome) if isinstance(outcome, ServingError) else outcome
        for outcome in outcomes
    ]


def _answer_with(
    answer: Callable[[int, Callable[[], Any]], None], call_id: int, future: Future[Any]
) -> None:
    answer(call_id, future.result)


if __name__ == "__main__":
    status = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)  # no interpreter teardown: a runtime's threads may not stop for it
