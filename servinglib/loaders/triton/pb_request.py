"""Triton's ``InferenceRequest`` and its ``InferenceResponseSender``, as ``execute`` gets them.

The server makes one InferenceRequest per request it hands a model's ``execute``
(:meth:`InferenceRequest.served`); a model may build one itself for a BLS call of another
model: ``exec()`` and ``await async_exec()``, each also ``decoupled=True``
(:mod:`~servinglib.loaders.triton.pb_bls`).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import final

from servinglib.errors import UnimplementedError
from servinglib.loaders.triton.pb_bls import (
    BlsCall,
    ResponseIterator,
    bls_call,
    bls_call_async,
    bls_stream,
    bls_stream_async,
)
from servinglib.loaders.triton.pb_types import (
    TRITONSERVER_REQUEST_RELEASE_RESCHEDULE,
    TRITONSERVER_RESPONSE_COMPLETE_FINAL,
    InferenceResponse,
    Tensor,
    TritonModelException,
)

Parameters = Mapping[str, bool | int | float | str]
Deliver = Callable[[InferenceResponse | None, bool], None]


def _never_cancelled() -> bool:
    return False


@final
class InferenceResponseSender:
    """Sends a request's responses (``send(response, flags=...)``), the last with
    ``flags=TRITONSERVER_RESPONSE_COMPLETE_FINAL``, from any thread, also after ``execute``
    returned.

    ``deliver(response, final)`` takes each send in order; nothing is delivered after the
    final one (a later send raises TritonModelException).  Thread-safe.
    """

    def __init__(self, deliver: Deliver, is_cancelled: Callable[[], bool]) -> None:
        self._deliver = deliver
        self._is_cancelled = is_cancelled
        self._lock = threading.Lock()
        self._closed = False  # guarded by: _lock

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        """Sends ``response`` (None: none, only the flag); COMPLETE_FINAL ends the request."""
        final = bool(flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        if response is not None and not isinstance(response, InferenceResponse):
            raise TritonModelException(
                f"send() takes a pb_utils.InferenceResponse, not {type(response).__name__}"
            )
        if response is None and not final:
            raise TritonModelException(
                "send() needs a response or flags=TRITONSERVER_RESPONSE_COMPLETE_FINAL"
            )
        with self._lock:
            if self._closed:
                raise TritonModelException(
                    "Unable to send a response: the request's final response was already sent"
                )
            self._closed = final
            self._deliver(response, final)  # under the lock: in order, none after the final

    def is_cancelled(self) -> bool:
        """True once the request is cancelled: its client left or its deadline passed."""
        return self._is_cancelled()


@final
class InferenceRequest:
    """One inference request: its input tensors, the outputs asked for, its id and parameters.

    Made by the server for ``execute``; the keyword arguments are Triton's
    (``correlation_id`` an int or a str).  Thread safety: read from any thread; a
    request made by the server is handed to one ``execute``.
    """

    def __init__(  # noqa: PLR0917 - Triton's constructor, argument for argument
        self,
        model_name: str = "",
        inputs: Sequence[Tensor] = (),
        requested_output_names: Sequence[str] = (),
        request_id: str = "",
        correlation_id: int | str = 0,
        model_version: int = -1,
        flags: int = 0,
        timeout: int = 0,
        preferred_memory: object = None,
        trace: object = None,
        parameters: Parameters | None = None,
    ) -> None:
        del preferred_memory, trace  # host memory only; servinglib traces its own way
        self._model_name = model_name
        self._inputs = list(inputs)
        self._requested_output_names = list(requested_output_names)
        self._request_id = request_id
        self._correlation_id = correlation_id
        self._model_version = model_version
        self._flags = flags
        self._timeout = timeout
        self._parameters = dict(parameters or {})
        self._sender: InferenceResponseSender | None = None
        self._is_cancelled: Callable[[], bool] = _never_cancelled

    @classmethod
    def served(
        cls,
        inputs: Sequence[Tensor],
        requested_output_names: Sequence[str],
        sender: InferenceResponseSender,
        *,
        model_name: str,
        model_version: int,
        request_id: str = "",
        correlation_id: int | str = 0,
        parameters: Parameters | None = None,
    ) -> InferenceRequest:
        """A request the server hands ``execute``: its responses go to ``sender``."""
        request = cls(
            model_name,
            inputs,
            requested_output_names,
            request_id=request_id,
            correlation_id=correlation_id,
            model_version=model_version,
            parameters=parameters,
        )
        request._sender = sender
        request._is_cancelled = sender.is_cancelled
        return request

    def inputs(self) -> list[Tensor]:
        """The input tensors."""
        return list(self._inputs)

    def requested_output_names(self) -> list[str]:
        """The outputs the client asked for (all the model's when it named none)."""
        return list(self._requested_output_names)

    def request_id(self) -> str:
        """The request's ``id`` (empty when the client gave none)."""
        return self._request_id

    def correlation_id(self) -> int | str:
        """The sequence's id (0: not part of a sequence)."""
        return self._correlation_id

    def model_name(self) -> str:
        """The model the request is for."""
        return self._model_name

    def model_version(self) -> int:
        """The version the request is for (-1: the model's policy picks)."""
        return self._model_version

    def flags(self) -> int:
        """The request's flags (``TRITONSERVER_REQUEST_FLAG_SEQUENCE_START``, ...)."""
        return self._flags

    def timeout(self) -> int:
        """The request's timeout in microseconds (0: none)."""
        return self._timeout

    def parameters(self) -> str:
        """The request's parameters as a JSON object."""
        return json.dumps(self._parameters)

    def is_cancelled(self) -> bool:
        """True once the request is cancelled: its client left or its deadline passed."""
        return self._is_cancelled()

    def get_response_sender(self) -> InferenceResponseSender:
        """The sender of this request's responses (decoupled models send through it)."""
        if self._sender is None:
            raise TritonModelException("Only a request given to execute() has a response sender")
        return self._sender

    def set_release_flags(self, flags: int) -> None:
        """Release flags: RESCHEDULE (sequence batching's) is not implemented."""
        if flags & TRITONSERVER_REQUEST_RELEASE_RESCHEDULE:
            raise UnimplementedError("Rescheduling a request is not implemented by servinglib")

    def exec(self, decoupled: bool = False) -> InferenceResponse | Iterator[InferenceResponse]:
        """Calls the model ``model_name`` (BLS) and returns its response (``decoupled``: an
        iterator of its responses, the last one empty), an error in it if the call failed.

        Blocks the thread; the call is bounded by the calling request's deadline and this
        request's ``timeout`` (the earlier).  Only inside a request the server runs (not in
        ``initialize``).
        """
        call = bls_stream if decoupled else bls_call
        return call(self._bls_call())

    async def async_exec(self, decoupled: bool = False) -> InferenceResponse | ResponseIterator:
        """:meth:`exec` awaited, for ``async def execute``; ``decoupled``: the callee's
        responses read to the end, then an empty one, iterated with ``for`` or ``async for``."""
        if decoupled:
            return await bls_stream_async(self._bls_call())
        return await bls_call_async(self._bls_call())

    def _bls_call(self) -> BlsCall:
        return BlsCall(
            self._model_name,
            self._model_version,
            self._inputs,
            self._requested_output_names,
            self._timeout,
        )
