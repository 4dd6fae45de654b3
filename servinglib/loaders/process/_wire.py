"""What a model process and its server send each other: pickled tuples over one socket.

Server → process: :data:`PREPARE` (once, first: the process imports the loader's
runtime), :data:`LOAD` (once, perhaps much later), then :data:`CALL` s; closing the
socket asks the process to unload and exit.  Process → server: :data:`LOADED` or
:data:`FAILED` (once), then one :data:`RESULT` or :data:`ERROR` per call.
Pickle protocol 5 carries numpy arrays whole; both ends are this package, one
interpreter and one servinglib, so nothing else has to read it.
"""

from __future__ import annotations

import pickle
from multiprocessing.connection import Connection
from typing import Any

from servinglib.errors import ServingError, StatusCode

PREPARE = "prepare"  # (PREPARE, factory, sys_path)
LOAD = "load"  # (LOAD, path, config)
CALL = "call"  # (CALL, call_id, signature_name, inputs, output_filter)
LOADED = "loaded"  # (LOADED, {name: SignatureSpec})
FAILED = "failed"  # (FAILED, code, message)
RESULT = "result"  # (RESULT, call_id, outputs)
ERROR = "error"  # (ERROR, call_id, code, message)

_PROTOCOL = 5


def send(connection: Connection, message: tuple[Any, ...]) -> None:
    """Writes one message.  Requires: no other thread writes to ``connection`` meanwhile."""
    connection.send_bytes(pickle.dumps(message, protocol=_PROTOCOL))


def receive(connection: Connection) -> tuple[Any, ...]:
    """Reads one message; EOFError once the other end has closed its socket."""
    message: tuple[Any, ...] = pickle.loads(connection.recv_bytes())
    return message


def error_fields(error: BaseException) -> tuple[int, str]:
    """An exception as (status code, message) for :func:`error_from`."""
    wrapped = ServingError.wrap(error)
    return int(wrapped.code), wrapped.message


def error_from(code: int, message: str) -> ServingError:
    """The ServingError a process sent as ``(code, message)``."""
    return ServingError.from_code(StatusCode(code), message)
