"""Calls of a served model from inside a call of another: the seam ensembles and BLS use.

The server that runs a call (the DataPlane) makes a :class:`ModelCaller` the call's own, as it
makes the deadline the call's (:func:`~servinglib.servable.request_deadline`): a context
variable, set around the placement, so it follows the call onto the worker that runs it and
across ``await``.  A model asks :func:`model_caller` for it and calls another served model by
name, version or label: the callee goes through the same plane (admission, lookup, its own
placement: its batching and instances, statistics, metrics, request log), its numpy arrays are
handed over as they are (no copy, no encoding), and the caller's deadline is the callee's.
"""

from __future__ import annotations

import abc
import contextlib
import contextvars
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

import numpy.typing as npt

from servinglib.errors import FailedPreconditionError
from servinglib.servable import Tensors

Outputs = dict[str, npt.NDArray[Any]]


class ModelCaller(abc.ABC):
    """Calls served models for the call that holds it (see the module's docstring).

    Each method takes the callee's ``model_name``, at most one of ``version`` (a number:
    exactly that version) and ``label`` (the version a label names; neither: the version the
    model serves, its latest), the ``signature_name`` (None: the default), the ``inputs`` and
    an ``output_filter`` (None: every output).  The caller's deadline bounds the call.  Errors
    are the callee's, raised as a plain request's would be (NOT_FOUND for a model not served,
    INVALID_ARGUMENT for inputs it rejects, DEADLINE_EXCEEDED, ...).

    Important: implementations run the callee through the same request path as a client's
    request and never copy the arrays.
    Thread safety: thread-safe; :meth:`call` blocks a thread with no running event loop (a
    worker's), :meth:`call_async` and :meth:`stream_async` run on an event loop.
    """

    @abc.abstractmethod
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
        """The callee's outputs, blocking this thread until they are ready.

        Raises FailedPreconditionError on a thread running an event loop (a blocking call
        there would stall every request on it: use :meth:`call_async`).
        """

    @abc.abstractmethod
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
        """The callee's outputs, awaited."""

    @abc.abstractmethod
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
        """The callee's parts (one for a signature that does not stream), each as it comes,
        blocking this thread; closing the iterator early ends the callee's stream.

        Raises FailedPreconditionError on a thread running an event loop.
        """

    @abc.abstractmethod
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
        """:meth:`stream` as an async iterator (``aclose()`` ends it early)."""


_caller: contextvars.ContextVar[ModelCaller | None] = contextvars.ContextVar(
    "servinglib_model_caller", default=None
)


def model_caller() -> ModelCaller:
    """The caller of the server running the current call.

    Raises FailedPreconditionError outside a call a server runs (a model called
    directly with ``call_signature``, or at load time: warmup included).
    """
    caller = _caller.get()
    if caller is None:
        raise FailedPreconditionError(
            "Models can call other models only inside a request a server runs "
            "(not at load, in warmup or through call_signature)"
        )
    return caller


def current_caller() -> ModelCaller | None:
    """The current call's caller (None outside a call a server runs): what a placement that
    runs calls on a thread of its own keeps with each, to make it theirs there."""
    return _caller.get()


def caller_scope(caller: ModelCaller) -> contextlib.AbstractContextManager[None]:
    """Makes ``caller`` the current call's :func:`model_caller` inside the ``with`` block."""
    if _caller.get() is caller:  # a call inside a call: already set
        return _NOTHING
    return _Scope(caller)


_NOTHING = contextlib.nullcontext()  # reusable: it holds no state


class _Scope:
    """Sets the caller for a ``with`` block.  Not thread-safe (one per ``with``)."""

    __slots__ = ("_caller", "_token")

    def __init__(self, caller: ModelCaller) -> None:
        self._caller = caller

    def __enter__(self) -> None:
        self._token = _caller.set(self._caller)

    def __exit__(self, *_exc: object) -> None:
        _caller.reset(self._token)
