"""Servicers written once for both gRPC servers: what an RPC waits for is a :class:`Step`.

A handler that waits is a generator: it yields each step and receives its result
(``result = yield from Step(plane.infer, plane.infer_blocking, ...)``); :func:`answer` awaits
each step's coroutine (grpc.aio), :func:`answer_blocking` calls its blocking twin.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Generator
from typing import Any, Generic, ParamSpec, TypeAlias, TypeVar, final

from google.protobuf import message as pb_message

T = TypeVar("T")
P = ParamSpec("P")
Response = TypeVar("Response", bound=pb_message.Message)

Steps: TypeAlias = Generator["Step[Any]", Any, Response]
"""A handler that waits: it yields its steps, is sent their results, returns its response."""

Outcome: TypeAlias = pb_message.Message | Steps[pb_message.Message]
"""What a handler returns: its response, or the steps that lead to it."""


@final
class Step(Generic[T]):
    """One call an RPC waits for, in both forms, with their shared arguments.

    Requires: ``run`` (a coroutine function, for grpc.aio) and
    ``run_blocking`` (for a thread with no event loop) do the same and raise
    the same errors.
    Thread safety: immutable; a driver runs one of the forms once.
    """

    __slots__ = ("_args", "_kwargs", "_run", "_run_blocking")

    def __init__(
        self,
        run: Callable[P, Awaitable[T]],
        run_blocking: Callable[P, T],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> None:
        self._run: Callable[..., Awaitable[T]] = run
        self._run_blocking: Callable[..., T] = run_blocking
        self._args = args
        self._kwargs = kwargs

    def __iter__(self) -> Generator[Step[T], T, T]:
        """Hands this step to the driver; its result is what ``yield from step`` gives."""
        return (yield self)

    async def run(self) -> T:
        """The call's result, awaited on the event loop."""
        return await self._run(*self._args, **self._kwargs)

    def run_blocking(self) -> T:
        """The call's result, on this thread (which it blocks meanwhile)."""
        return self._run_blocking(*self._args, **self._kwargs)


def blocking(function: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Step[T]:
    """A step that blocks (a model load, a config reload): under grpc.aio it runs on a worker
    thread, so the loop keeps serving; on a synchronous server's thread, right there."""

    async def in_thread(*args: P.args, **kwargs: P.kwargs) -> T:
        return await asyncio.to_thread(function, *args, **kwargs)

    return Step(in_thread, function, *args, **kwargs)


async def answer(outcome: Outcome) -> pb_message.Message:
    """The response a handler's ``outcome`` leads to on grpc.aio: each step awaited."""
    if isinstance(outcome, pb_message.Message):
        return outcome
    try:
        step = next(outcome)
        while True:
            try:
                result = await step.run()
            except BaseException as error:  # noqa: BLE001 - raised at the handler's yield
                step = outcome.throw(error)
            else:
                step = outcome.send(result)
    except StopIteration as done:
        response: pb_message.Message = done.value
        return response


def answer_blocking(outcome: Outcome) -> pb_message.Message:
    """The response a handler's ``outcome`` leads to on a server thread: each step called."""
    if isinstance(outcome, pb_message.Message):
        return outcome
    try:
        step = next(outcome)
        while True:
            try:
                result = step.run_blocking()
            except BaseException as error:  # noqa: BLE001 - raised at the handler's yield
                step = outcome.throw(error)
            else:
                step = outcome.send(result)
    except StopIteration as done:
        response: pb_message.Message = done.value
        return response
