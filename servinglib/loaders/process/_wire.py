"""What a model process and its server send each other: pickled tuples over one socket."""

from __future__ import annotations

import contextlib
import logging
import pickle
import time
from multiprocessing.connection import Connection
from typing import Any, final

import attrs

from servinglib.errors import ServingError, StatusCode
from servinglib.request_extras import RequestExtras, request_extras, request_extras_scope
from servinglib.servable import deadline_scope, request_deadline

PREPARE = "prepare"  # (PREPARE, factory, sys_path)
LOAD = "load"  # (LOAD, path, config)
CALL = "call"  # (CALL, call_id, signature_name, inputs, output_filter, request)
# (REQUESTS, call_id, [(inputs, output_filter, request, also_wanted), ...]): one execute() of
# them all (also_wanted: outputs the servable takes beside those asked for),
# answered by a RESULT whose outputs are a list: each request's outputs or (code, message).
REQUESTS = "requests"
LOADED = "loaded"  # (LOADED, {name: SignatureSpec})
FAILED = "failed"  # (FAILED, code, message)
RESULT = "result"  # (RESULT, call_id, outputs)
ERROR = "error"  # (ERROR, call_id, code, message)
LOG = "log"  # (LOG, a LogRecord's fields): the process's log lines, logged by the server

_PROTOCOL = 5


@final
@attrs.frozen
class RequestContext:
    """What a call carries beside its tensors into the process: the request's extras (id,
    sequence id, parameters) and how long it may still take (None: no deadline), in seconds
    (a duration, not a time: each process reads its own clock).  Immutable."""

    extras: RequestExtras
    timeout_s: float | None

    @classmethod
    def current(cls) -> RequestContext:
        """The calling request's (its extras and deadline are context variables)."""
        deadline = request_deadline()
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        return cls(request_extras(), timeout)

    def scope(self) -> contextlib.ExitStack:
        """Makes this the current request's (extras and deadline) in the ``with`` block."""
        stack = contextlib.ExitStack()
        if self.timeout_s is not None:
            stack.enter_context(deadline_scope(time.monotonic() + self.timeout_s))
        stack.enter_context(request_extras_scope(self.extras))
        return stack


def send(connection: Connection, message: tuple[Any, ...]) -> None:
    """Writes one message.  Requires: no other thread writes to ``connection`` meanwhile."""
    connection.send_bytes(pickle.dumps(message, protocol=_PROTOCOL))


def receive(connection: Connection) -> tuple[Any, ...]:
    """Reads one message; EOFError once the other end has closed its socket."""
    message: tuple[Any, ...] = pickle.loads(connection.recv_bytes())
    return message


def receive_reply(connection: Connection) -> tuple[Any, ...]:
    """Reads the next message that is not a LOG, logging the LOGs before it here."""
    while True:
        message = receive(connection)
        if message[0] != LOG:
            return message
        log(message)


def log(message: tuple[Any, ...]) -> None:
    """Logs a LOG message here, as the process's logger would have."""
    record = logging.makeLogRecord(message[1])
    logger = logging.getLogger(record.name)
    if logger.isEnabledFor(record.levelno):
        logger.handle(record)


def log_fields(record: logging.LogRecord, pid: int) -> dict[str, Any]:
    """A record of a model process as picklable fields, its message saying whose it is."""
    fields = dict(record.__dict__)
    fields["msg"] = f"model process {pid}: {record.getMessage()}"
    fields["args"] = None
    if record.exc_info:
        fields["exc_text"] = logging.Formatter().formatException(record.exc_info)
    fields["exc_info"] = None
    fields["model_process"] = pid
    return fields


def error_fields(error: BaseException) -> tuple[int, str]:
    """An exception as (status code, message) for :func:`error_from`."""
    wrapped = ServingError.wrap(error)
    return int(wrapped.code), wrapped.message


def error_from(code: int, message: str) -> ServingError:
    """The ServingError a process sent as ``(code, message)``."""
    return ServingError.from_code(StatusCode(code), message)
