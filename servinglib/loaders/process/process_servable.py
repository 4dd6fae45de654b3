"""ProcessServable: a version loaded and served by its own process, called over a socket."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Mapping
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
from servinglib.loaders.process._spawn import Started, spares
from servinglib.servable import (
    ExecutionMode,
    Servable,
    SignatureSpec,
    Tensors,
    request_deadline,
)

_log = logging.getLogger(__name__)


@final
class _Pending:
    """One call's answer, filled in by the reader thread."""

    __slots__ = ("done", "error", "outputs")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.outputs: dict[str, npt.NDArray[Any]] | None = None
        self.error: ServingError | None = None


@final
class ProcessServable(Servable):
    """The signatures of a version that another process loaded and serves.

    :meth:`start` has a process (``python -m servinglib.loaders.process._child``)
    build ``factory(path, config)`` (a :class:`~servinglib.core.loader.Loader`;
    ``factory`` is ``"module:attribute"``), loads it (at idle priority, so the
    load takes no CPU time the server wants) and serves it.  Each :meth:`call`
    sends the inputs over a socket and blocks its thread until the process
    answers (or the request's deadline passes: DEADLINE_EXCEEDED).  Every
    signature runs in ``thread`` mode here, whatever it is in the process.
    If the process dies, its calls fail with UNAVAILABLE naming its exit
    status, and so does every call after; the server goes on.  :meth:`close`
    makes the process unload the version and exit.  The first load of a
    factory starts a process; each load then starts a spare for the next one.
    Thread-safe: calls run concurrently (up to 8 at once in the process).
    """

    def __init__(
        self,
        started: Started,
        signatures: Mapping[str, SignatureSpec],
        label: str,
    ) -> None:
        """Use :meth:`start`."""
        self._started = started
        self._process = started.process
        self._connection = started.connection
        self._label = label
        self._signatures = MappingProxyType(
            {n: attrs.evolve(s, execution_mode=ExecutionMode.THREAD) for n, s in signatures.items()}
        )
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._pending: dict[int, _Pending] = {}  # guarded by: _lock
        self._gone: ServingError | None = None  # why calls fail now; guarded by: _lock
        self._closed = False  # guarded by: _lock
        self._send_lock = threading.Lock()
        self._reader = threading.Thread(
            target=self._read, name=f"servinglib-process-{self._process.pid}", daemon=True
        )
        self._reader.start()

    @classmethod
    def start(cls, factory: str, path: str, config: Any) -> ProcessServable:  # noqa: ANN401 - the platform's config
        """A process (the factory's spare) loads ``factory(path, config)``; returns once it serves.

        Raises the load's own error (its status code and message) if the
        version fails to load, UNAVAILABLE if the process exits first.  Then
        starts the factory's next spare process.
        """
        started = spares.take(factory)
        label = f"model process {started.process.pid} ({path})"
        try:
            _wire.send(started.connection, (_wire.LOAD, path, config))
            reply = _wire.receive(started.connection)
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
                raise _exited(label, status)
            raise _wire.error_from(reply[1], reply[2])
        return cls(started, reply[1], label)

    @property
    def pid(self) -> int:
        """The process's id."""
        return self._process.pid

    @property
    def signatures(self) -> Mapping[str, SignatureSpec]:
        return self._signatures

    def call(
        self, signature_name: str, inputs: Tensors, output_filter: frozenset[str] | None = None
    ) -> dict[str, npt.NDArray[Any]]:
        pending = _Pending()
        call_id = next(self._ids)
        with self._lock:
            if self._gone is not None:
                raise self._gone
            self._pending[call_id] = pending
        try:
            message = (_wire.CALL, call_id, signature_name, dict(inputs), output_filter)
            with self._send_lock:
                _wire.send(self._connection, message)
        except OSError:
            pass  # the process has gone: the reader fails this call with why
        deadline = request_deadline()
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not pending.done.wait(timeout):
            with self._lock:
                self._pending.pop(call_id, None)
            raise DeadlineExceededError(f"The {self._label} did not answer before the deadline")
        if pending.error is not None:
            raise pending.error
        assert pending.outputs is not None
        return pending.outputs

    def close(self) -> None:
        """Makes the process unload the version and exit (killed after ``EXIT_TIMEOUT_S``).

        Idempotent.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._gone is None:
                self._gone = FailedPreconditionError(f"The {self._label} has been unloaded")
        status = self._started.stop()  # the process reads EOF: it unloads and exits
        self._reader.join()
        self._started.close()
        if status != 0:
            _log.warning("The %s exited with status %s", self._label, status)

    def _read(self) -> None:
        while True:
            try:
                reply = _wire.receive(self._connection)
            except (EOFError, OSError):
                break
            with self._lock:
                pending = self._pending.pop(reply[1], None)
            if pending is None:  # its caller gave up (deadline)
                continue
            if reply[0] == _wire.RESULT:
                pending.outputs = reply[2]
            else:
                pending.error = _wire.error_from(reply[2], reply[3])
            pending.done.set()
        with self._lock:
            unloading = self._gone is not None
            if not unloading:
                self._gone = _exited(self._label, self._process.wait())
            gone, pending_calls = self._gone, list(self._pending.values())
            self._pending.clear()
        if not unloading:
            _log.error("%s; its calls fail until the version is reloaded", gone)
        for pending in pending_calls:
            pending.error = gone
            pending.done.set()


def _exited(label: str, status: int | None) -> UnavailableError:
    return UnavailableError(f"The {label} exited with status {status}")
