"""ServerCaller: a model process's ModelCaller, each call sent to its server and answered there."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import itertools
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from typing import Any, TypeVar, final

from servinglib.errors import (
    FailedPreconditionError,
    ServingError,
    UnavailableError,
    UnimplementedError,
)
from servinglib.loaders.process import _wire
from servinglib.model_calls import ModelCaller, Outputs, caller_scope
from servinglib.servable import Tensors, request_deadline

_T = TypeVar("_T")

_call_id: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "servinglib_process_call", default=None
)


@final
class _Answer:
    __slots__ = ("done", "message")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.message: tuple[Any, ...] = ()


@final
class ServerCaller(ModelCaller):
    """Calls served models from inside a call the process runs: each call is a MODEL_CALL
    naming that call, which the server runs in the context of the request that made the call
    (its caller, deadline and extras: see ProcessServable) and answers with the callee's
    outputs or error.

    ``send(message)`` writes a message to the server; ``reading_meanwhile()`` (a context
    manager) makes sure a thread reads the server's messages while a call waits for its
    answer.  Streams are not
    served across the socket: :meth:`stream` and :meth:`stream_async` raise
    UnimplementedError.  Thread-safe.
    """

    def __init__(
        self,
        send: Callable[[tuple[Any, ...]], None],
        reading_meanwhile: Callable[[], contextlib.AbstractContextManager[None]],
    ) -> None:
        self._send = send
        self._reading_meanwhile = reading_meanwhile
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._waiting: dict[int, _Answer] = {}  # guarded by: _lock
        self._ended = False  # guarded by: _lock

    def scope(self, call_id: int) -> contextlib.ExitStack:
        """Makes this the caller, for calls made inside call ``call_id``, in the ``with``
        block."""
        stack = contextlib.ExitStack()
        token = _call_id.set(call_id)
        stack.callback(_call_id.reset, token)
        stack.enter_context(caller_scope(self))
        return stack

    def within(self, call_id: int, work: Callable[[], _T]) -> Callable[[], _T]:
        """``work`` run inside :meth:`scope` of ``call_id``."""

        def run() -> _T:
            with self.scope(call_id):
                return work()

        return run

    def end(self) -> None:
        """Fails every call waiting for an answer, and those made later: the server has gone."""
        error = (_wire.ERROR, 0, *_wire.error_fields(UnavailableError("The server has gone")))
        with self._lock:
            self._ended = True
            waiting, self._waiting = self._waiting, {}
        for answer in waiting.values():
            answer.message = error
            answer.done.set()

    def answered(self, message: tuple[Any, ...]) -> None:
        """Hands the server's RESULT or ERROR to the call waiting for it (if it still waits)."""
        with self._lock:
            answer = self._waiting.pop(message[1], None)
        if answer is not None:
            answer.message = message
            answer.done.set()

    def call(
        self,
        model_name: str,
        inputs: Tensors,
        *,
        version: int | None = None,
        label: str | None = None,
        signature_name: str | None = None,
        output_filter: Iterable[str] | None = None,
    ) -> Outputs:
        options = _options(version, label, signature_name, output_filter)
        return self._call(model_name, inputs, options, awaited=False)

    async def call_async(
        self,
        model_name: str,
        inputs: Tensors,
        *,
        version: int | None = None,
        label: str | None = None,
        signature_name: str | None = None,
        output_filter: Iterable[str] | None = None,
    ) -> Outputs:
        options = _options(version, label, signature_name, output_filter)
        return await asyncio.to_thread(self._call, model_name, inputs, options, awaited=True)

    def _call(
        self, model_name: str, inputs: Tensors, options: dict[str, Any], *, awaited: bool
    ) -> Outputs:
        """Sends the call and waits for its answer; ``awaited``: the server awaits the callee
        (its deadline then cuts the wait off, as an awaited call's does in the server)."""
        parent = _call_id.get()
        if parent is None:
            raise FailedPreconditionError(
                "Models can call other models only inside a request a server runs"
            )
        deadline = request_deadline()  # (a BLS request's own timeout may have set it)
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        nested = next(self._ids)
        answer = _Answer()
        with self._lock:
            if self._ended:
                raise UnavailableError("The server has gone")
            self._waiting[nested] = answer
        try:
            self._send(
                (
                    _wire.MODEL_CALL,
                    nested,
                    parent,
                    model_name,
                    dict(inputs),
                    options,
                    timeout,
                    awaited,
                )
            )
            with self._reading_meanwhile():
                answer.done.wait()  # the server answers every call (within its deadline)
        finally:
            with self._lock:
                self._waiting.pop(nested, None)
        if answer.message[0] == _wire.ERROR:
            raise _wire.error_from(answer.message[2], answer.message[3])
        outputs: Outputs = answer.message[2]
        return outputs

    def stream(
        self,
        model_name: str,
        inputs: Tensors,
        *,
        version: int | None = None,
        label: str | None = None,
        signature_name: str | None = None,
        output_filter: Iterable[str] | None = None,
    ) -> Iterator[Outputs]:
        raise _no_streams(model_name)

    def stream_async(
        self,
        model_name: str,
        inputs: Tensors,
        *,
        version: int | None = None,
        label: str | None = None,
        signature_name: str | None = None,
        output_filter: Iterable[str] | None = None,
    ) -> AsyncIterator[Outputs]:
        raise _no_streams(model_name)


def _options(
    version: int | None,
    label: str | None,
    signature_name: str | None,
    output_filter: Iterable[str] | None,
) -> dict[str, Any]:
    return {
        "version": version,
        "label": label,
        "signature_name": signature_name,
        "output_filter": None if output_filter is None else tuple(output_filter),
    }


def _no_streams(model_name: str) -> ServingError:
    return UnimplementedError(
        f"A model in a model process cannot stream the answers of model {model_name:.200}: "
        "serve the calling model in the server's process (one instance, no model_process)"
    )
