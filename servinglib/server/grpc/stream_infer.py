"""KServe V2 / Triton ``ModelStreamInfer``: a bidirectional stream of requests and their parts.

Each request is answered by one response per part (or one, for a signature that does not
stream), all carrying its ``id``; a failing request gets one response with ``error_message`` and
the stream stays open.  The final-response flags: docs/guides/streaming.md.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import queue
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, Final, final

import grpc
import grpc.aio
from google.protobuf import message as pb_message

from servinglib.codecs.limits import DEFAULT_LIMITS, DecodeLimits
from servinglib.errors import InvalidArgumentError, ServingError, StatusCode
from servinglib.protos import grpc_service_pb2 as v2
from servinglib.request_extras import request_extras_scope
from servinglib.server.grpc._convert import deadline_of
from servinglib.server.grpc.inference_service import (
    Metadata,
    decode_request,
    encode_response,
    forwarded,
    text_metadata,
)
from servinglib.server.header_forwarding import HeaderForwarding
from servinglib.server.observe.request_record import RequestObserver, RequestRecord
from servinglib.server.plane.data_plane import DataPlane

_log = logging.getLogger("servinglib.server.grpc")

METHOD: Final = "ModelStreamInfer"
API: Final = "stream_infer"
FINAL_RESPONSE: Final = "triton_final_response"
EMPTY_FINAL_RESPONSE: Final = "triton_enable_empty_final_response"
REQUESTS_AT_ONCE: Final = 64
"""Requests of one stream answered at once; past them the stream's further requests wait."""
RESPONSES_AHEAD: Final = 16
"""Responses a stream holds ready for a client that reads slowly; past them the models wait."""
Release = Callable[[], None]
"""Gives back what a response holds of the stream budget, once it is sent or dropped."""


@final
class StreamInferer:
    """Answers the requests of ModelStreamInfer through a DataPlane.  Thread-safe: stateless."""

    def __init__(
        self,
        plane: DataPlane,
        decode_limits: DecodeLimits = DEFAULT_LIMITS,
        header_forwarding: HeaderForwarding | None = None,
    ) -> None:
        self._plane = plane
        self._decode_limits = decode_limits
        self._header_forwarding = header_forwarding

    async def answer(
        self, data: bytes, deadline: float | None, metadata: Metadata = ()
    ) -> AsyncGenerator[tuple[v2.ModelStreamInferResponse, str, StatusCode, Release], None]:
        """The responses to one serialized ModelInferRequest, each with its model, outcome and
        what releases the bytes it holds of the plane's stream budget.

        The outcome is OK but for the last response of a failed request (its
        error's code).  Call the release once the response is sent (or dropped).
        Closing the iterator early (``aclose``; leaving an ``async for`` does
        not) closes the plane's stream, and so the model's generator.  ``metadata``: the
        stream's, whose forwarded keys reach the model as request parameters.
        """
        request = v2.ModelInferRequest()
        try:
            try:
                request.ParseFromString(data)
            except pb_message.DecodeError as error:
                raise InvalidArgumentError(
                    f"Cannot decode the ModelInferRequest: {error}"
                ) from None
            call = decode_request(request, self._decode_limits)
            if self._header_forwarding is not None:
                call = forwarded(call, self._header_forwarding, metadata)
            await self._plane.loaded(call.spec, deadline=deadline)  # (loaded on demand)
            stream = self._plane.open_stream(
                call.spec, call.signature, call.inputs, call.requested, deadline=deadline
            )
            # One task iterates this generator, so the scope is set and reset in its context.
            with request_extras_scope(call.extras):
                async with stream:
                    final = not stream.streaming  # a streaming signature's last part is unknown
                    async for outputs in stream:
                        response = encode_response(
                            request, call, stream.model_name, stream.version, outputs
                        )
                        sent = stream.hand_over()
                        yield (
                            _wrapped(response, final=final),
                            request.model_name,
                            StatusCode.OK,
                            sent,
                        )
        except ServingError as error:
            yield _error(request, error.message), request.model_name, error.code, _nothing
            return
        except Exception as error:  # noqa: BLE001 - one request's failure never ends the stream
            _log.exception("%s: request %r failed", METHOD, request.id)
            message = f"{type(error).__name__}: {error}"
            yield _error(request, message), request.model_name, StatusCode.INTERNAL, _nothing
            return
        if stream.streaming and _wants_empty_final(request):
            empty = v2.ModelInferResponse(
                model_name=stream.model_name, model_version=str(stream.version), id=request.id
            )
            yield _wrapped(empty, final=True), request.model_name, StatusCode.OK, _nothing


def _wrapped(response: v2.ModelInferResponse, *, final: bool) -> v2.ModelStreamInferResponse:
    response.parameters[FINAL_RESPONSE].bool_param = final
    return v2.ModelStreamInferResponse(infer_response=response)


def _error(request: v2.ModelInferRequest, message: str) -> v2.ModelStreamInferResponse:
    named = v2.ModelInferResponse(
        model_name=request.model_name, model_version=request.model_version, id=request.id
    )
    named.parameters[FINAL_RESPONSE].bool_param = True
    return v2.ModelStreamInferResponse(error_message=message, infer_response=named)


def _wants_empty_final(request: v2.ModelInferRequest) -> bool:
    if EMPTY_FINAL_RESPONSE not in request.parameters:
        return False
    return request.parameters[EMPTY_FINAL_RESPONSE].bool_param


def stream_stream_handler(
    service: str, inferer: StreamInferer, observer: RequestObserver | None
) -> grpc.RpcMethodHandler[Any, Any]:
    """ModelStreamInfer on grpc.aio: requests answered concurrently, responses as they come.

    At most :data:`REQUESTS_AT_ONCE` requests of the stream run at once
    (the next ones are read when one ends).  Reports one RequestRecord per
    request (latency: from its arrival to its last response).  A client
    that cancels (or the server's stop past its grace) cancels every
    request's stream, closing their generators.
    """

    serve = _serving(service, inferer, observer)

    async def call(
        requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext[Any, Any]
    ) -> None:
        async def write(response: bytes, sent: Release) -> None:
            try:
                await context.write(response)
            finally:
                sent()

        await serve(requests, write, deadline_of(context), text_metadata(context))

    return grpc.stream_stream_rpc_method_handler(call)


Write = Callable[[bytes, Release], Awaitable[None]]
"""Sends a response; then releases the stream-budget bytes it holds (also when it fails)."""
Serve = Callable[[AsyncIterator[bytes], Write, float | None, Metadata], Awaitable[None]]


def _serving(service: str, inferer: StreamInferer, observer: RequestObserver | None) -> Serve:
    """One stream's loop, whatever the server: read requests, answer them concurrently, write."""

    async def serve(
        requests: AsyncIterator[bytes],
        write: Write,
        deadline: float | None,
        metadata: Metadata,
    ) -> None:
        out: asyncio.Queue[tuple[bytes, Release] | None] = asyncio.Queue(RESPONSES_AHEAD)
        running: set[asyncio.Task[None]] = set()

        async def answer(data: bytes) -> None:
            started = time.perf_counter()
            model, code = "", StatusCode.OK
            try:
                async with contextlib.aclosing(
                    inferer.answer(data, deadline, metadata)
                ) as responses:
                    async for response, model_name, outcome, sent in responses:
                        model, code = model_name, outcome
                        try:
                            await out.put((response.SerializeToString(), sent))
                        except BaseException:
                            sent()
                            raise
            except asyncio.CancelledError:
                code = StatusCode.CANCELLED
                raise
            finally:
                if observer is not None:
                    observer(_record(service, model, code, time.perf_counter() - started))

        async def read() -> None:
            try:
                async for data in requests:
                    while len(running) >= REQUESTS_AT_ONCE:  # hold the client back
                        await asyncio.wait(running.copy(), return_when=asyncio.FIRST_COMPLETED)
                    task = asyncio.create_task(answer(data))
                    running.add(task)
                    task.add_done_callback(running.discard)
            except grpc.RpcError as error:  # the client's side of the stream broke
                _log.info("%s: reading requests ended: %s", METHOD, error)
            while running:
                await asyncio.wait(set(running))
            await out.put(None)

        reader = asyncio.create_task(read())
        try:
            while (item := await out.get()) is not None:
                try:
                    await write(*item)
                except Exception as error:  # noqa: BLE001 - the call ended under us (cancelled)
                    _log.debug("%s: a response could not be sent: %r", METHOD, error)
                    return
        finally:
            for task in (reader, *running):
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(reader, *running, return_exceptions=True)
            while not out.empty():  # responses never sent: their bytes go back
                if (left := out.get_nowait()) is not None:
                    left[1]()

    return serve


@final
class StreamLoop:
    """The event loop the synchronous server's ModelStreamInfer calls share, started with the
    first.  :meth:`close` stops it once no stream uses it.  Thread-safe.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None  # guarded by: _lock
        self._streams = 0  # guarded by: _lock; streams between enter and leave
        self._closing = False  # guarded by: _lock

    def enter(self) -> asyncio.AbstractEventLoop:
        """The loop, for one more stream; call :meth:`leave` when the stream's task has ended."""
        with self._lock:
            if self._loop is None:
                self._loop = loop = asyncio.new_event_loop()
                threading.Thread(
                    target=_run_until_stopped, args=(loop,), name="servinglib-streams", daemon=True
                ).start()
            self._streams += 1
            return self._loop

    def leave(self) -> None:
        """Ends what :meth:`enter` started."""
        with self._lock:
            self._streams -= 1
            if self._closing:
                self._stop_if_idle_locked()

    def close(self) -> None:
        """Stops the loop once the streams still using it have left; idempotent."""
        with self._lock:
            self._closing = True
            self._stop_if_idle_locked()

    def _stop_if_idle_locked(self) -> None:
        if self._streams == 0 and self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._loop = None


def _run_until_stopped(loop: asyncio.AbstractEventLoop) -> None:
    try:
        loop.run_forever()
    finally:
        loop.close()


def blocking_stream_stream_handler(
    service: str, inferer: StreamInferer, observer: RequestObserver | None, streams: StreamLoop
) -> grpc.RpcMethodHandler[Any, Any]:
    """ModelStreamInfer on grpcio's synchronous server: the stream's loop on ``streams``' loop.

    The RPC's thread relays requests (read by the stream's own executor) and
    responses (through a bounded queue, so a slow reader holds the models
    back).  A client that cancels, or the server's stop, cancels the stream's
    requests, closing their generators.
    """
    serve = _serving(service, inferer, observer)

    def call(requests: Iterator[bytes], context: grpc.ServicerContext) -> Iterator[bytes]:
        deadline = deadline_of(context)
        metadata = text_metadata(context)
        responses: queue.Queue[tuple[bytes, Release] | None] = queue.Queue(RESPONSES_AHEAD)
        loop = streams.enter()
        executor = concurrent.futures.ThreadPoolExecutor(
            2, thread_name_prefix="servinglib-stream-io"
        )
        done = object()
        ended = threading.Event()
        tasks: list[asyncio.Task[None]] = []

        async def read() -> AsyncIterator[bytes]:
            while (data := await loop.run_in_executor(executor, next, requests, done)) is not done:
                yield data  # type: ignore[misc]

        async def write(response: bytes, sent: Release) -> None:
            # The RPC's thread releases the response's bytes once grpcio has taken it.
            try:
                responses.put_nowait((response, sent))  # room: no hop to an executor thread
            except queue.Full:  # a slow reader: wait for room off the loop
                try:
                    await loop.run_in_executor(executor, responses.put, (response, sent))
                except BaseException:
                    sent()
                    raise

        async def run() -> None:
            try:
                await serve(read(), write, deadline, metadata)
            finally:
                await loop.run_in_executor(executor, responses.put, None)

        def start() -> None:
            tasks.append(task := loop.create_task(run()))
            task.add_done_callback(lambda _task: ended.set())

        loop.call_soon_threadsafe(start)
        sent: Release = _nothing
        try:
            while (item := responses.get()) is not None:
                response, sent = item
                yield response
                sent()  # grpcio took the response: it asks for the next
        finally:
            sent()
            # tasks[0] is looked up on the loop, after start (callbacks run in order).
            loop.call_soon_threadsafe(lambda: tasks[0].cancel())  # noqa: PLW0108
            while not ended.is_set():  # the loop's last put may wait for room
                with contextlib.suppress(queue.Empty):
                    _release(responses.get(timeout=0.05))
            while not responses.empty():
                _release(responses.get_nowait())
            executor.shutdown(wait=False)  # its threads end with their jobs
            streams.leave()

    return grpc.stream_stream_rpc_method_handler(call)


def _release(item: tuple[bytes, Release] | None) -> None:
    if item is not None:
        item[1]()


def _nothing() -> None:
    pass


def _record(service: str, model: str, code: StatusCode, latency_s: float) -> RequestRecord:
    return RequestRecord(
        model_name=model,
        api=API,
        entrypoint="GRPC",
        code=code,
        latency_s=latency_s,
        service=service,
        method=METHOD,
    )
