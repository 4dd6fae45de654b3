"""What a model process and its server send each other: pickled tuples over one socket."""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import struct
import time
from multiprocessing.connection import Connection
from typing import Any, final

import attrs

from servinglib.errors import ServingError, StatusCode
from servinglib.request_extras import (
    NO_EXTRAS,
    RequestExtras,
    request_extras,
    request_extras_scope,
)
from servinglib.servable import deadline_scope, request_deadline

PREPARE = "prepare"  # (PREPARE, factory, sys_path)
# (LOAD, path, config, call_threads): call_threads: the calls the process runs at once (more wait
# unread, in order; 1: one call at a time, an instance's)
LOAD = "load"
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
# (MODEL_CALL, nested_id, call_id, model_name, inputs, options, timeout_s, awaited): a model the
# process runs calls another served model inside its call call_id (options: ModelCaller.call's
# keywords; timeout_s: the time the process's request has left, None: no deadline; awaited: the
# server awaits the callee, so that the deadline cuts the wait off); the server answers with a
# RESULT or ERROR of nested_id.
MODEL_CALL = "model_call"

_PROTOCOL = 5

CALL_THREADS = 8
"""Calls a model process runs at once, unless it runs one at a time (an instance)."""


@final
@attrs.frozen
class RequestContext:
    """What a call carries beside its tensors into the process: the request's extras (id,
    sequence id, parameters) and how long it may still take (None: no deadline), in seconds
    (a duration, not a time: each process reads its own monotonic clock), from ``sent_at``
    (``time.time()``: the wall clock, the one clock processes share, so that the time a call
    waited unread in the process's socket counts).  Immutable."""

    extras: RequestExtras
    timeout_s: float | None
    sent_at: float = attrs.field(factory=time.time)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as a tuple of its fields, no extras as None (a call's pickle is on the hot
        path)."""
        extras = None if self.extras is NO_EXTRAS else self.extras
        return (_request_context, (extras, self.timeout_s, self.sent_at))

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
            waited = max(0.0, time.time() - self.sent_at)
            stack.enter_context(deadline_scope(time.monotonic() + self.timeout_s - waited))
        stack.enter_context(request_extras_scope(self.extras))
        return stack


def _request_context(
    extras: RequestExtras | None, timeout_s: float | None, sent_at: float
) -> RequestContext:
    return RequestContext(NO_EXTRAS if extras is None else extras, timeout_s, sent_at)


OUT_OF_BAND_MIN_BYTES = 64 * 1024
"""A buffer this large or larger (a numpy array's data) is sent beside the pickle, not in it."""

_COUNT = struct.Struct("!I")
_SIZE = struct.Struct("!Q")
_NO_BUFFERS = _COUNT.pack(0)


def send(connection: Connection, message: tuple[Any, ...], *, small: bool = False) -> None:
    """Writes one message: a frame of its pickle, headed by the sizes of its large buffers,
    then those buffers' bytes as they are in memory (pickle protocol 5, out of band: no
    copy of a large array is made to send it).  ``small``: the caller knows it holds no
    large buffer (all goes in the frame, with no look at each buffer).

    Requires: no other thread writes to ``connection`` meanwhile.
    """
    if small:
        connection.send_bytes(_NO_BUFFERS + pickle.dumps(message, protocol=_PROTOCOL))
        return
    buffers: list[memoryview] = []

    def out_of_band(buffer: pickle.PickleBuffer) -> bool:
        raw = buffer.raw()
        if raw.nbytes < OUT_OF_BAND_MIN_BYTES:
            return True  # in the pickle: a write of its own would cost more
        buffers.append(raw)
        return False

    payload = pickle.dumps(message, protocol=_PROTOCOL, buffer_callback=out_of_band)
    if not buffers:
        connection.send_bytes(_NO_BUFFERS + payload)
        return
    head = _COUNT.pack(len(buffers)) + b"".join(_SIZE.pack(b.nbytes) for b in buffers)
    connection.send_bytes(head + payload)
    for buffer in buffers:
        _write_all(connection.fileno(), buffer)


def receive(connection: Connection) -> tuple[Any, ...]:
    """Reads one message; EOFError once the other end has closed its socket.

    Its large buffers are read straight into memory of their own, which the arrays they
    were keep (writable, as an array unpickled in-band is).
    """
    received = connection.recv_bytes()
    frame = memoryview(received)[_COUNT.size :]
    if received.startswith(_NO_BUFFERS):
        no_buffers: tuple[Any, ...] = pickle.loads(frame)
        return no_buffers
    (count,) = _COUNT.unpack_from(received)
    sizes = [_SIZE.unpack_from(frame, i * _SIZE.size)[0] for i in range(count)]
    buffers = [_read_exactly(connection.fileno(), size) for size in sizes]
    message: tuple[Any, ...] = pickle.loads(frame[count * _SIZE.size :], buffers=buffers)
    return message


def _write_all(fd: int, data: memoryview) -> None:
    data = data.cast("B")
    while data:
        data = data[os.write(fd, data) :]


def _read_exactly(fd: int, size: int) -> bytearray:
    into = bytearray(size)
    view, done = memoryview(into), 0
    while done < size:
        read = os.readv(fd, [view[done:]])
        if read == 0:
            raise EOFError
        done += read
    return into


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
