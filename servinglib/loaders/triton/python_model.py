"""A Triton Python-backend model (``class TritonPythonModel``) served as a Servable.

:func:`load_triton_python_model` completes the model's configuration (its ``config.pbtxt``,
then its ``auto_complete_config``), calls ``initialize(args)`` with Triton's ``args``, and
serves one signature, ``serving_default``, whose tensors are the completed config's.  Each
call is one request handed to ``execute`` (:meth:`TritonPythonServable.execute_requests`
takes a list, for a batcher that gathers several); a decoupled model's signature streams
the responses its sender sends.  ``finalize()`` runs when the version unloads.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from time import monotonic
from typing import Any, final

import numpy as np
import numpy.typing as npt

from servinglib.errors import InternalError, InvalidArgumentError, ServingError
from servinglib.loaders.triton.config import (
    TritonModelConfig,
    check_batch_size,
    execution_mode,
    instance_count,
    tensor_specs,
    warn_unimplemented,
)
from servinglib.loaders.triton.instance_thread import InstanceThread
from servinglib.loaders.triton.model_warmup import run_warmup
from servinglib.loaders.triton.pb_request import InferenceRequest, InferenceResponseSender
from servinglib.loaders.triton.pb_types import InferenceResponse, Tensor, response_parameters
from servinglib.loaders.triton.python_config import (
    CLASS_NAME,
    completed_config,
    initialize_args,
    instance_name,
    not_implemented,
)
from servinglib.loaders.triton.request_batching import request_batching
from servinglib.loaders.triton.sequence_servable import TritonSequenceServable
from servinglib.request_extras import RequestExtras, request_extras
from servinglib.response_extras import ResponseExtras, current_response_extras
from servinglib.servable import (
    DEFAULT_SIGNATURE,
    ExecutionMode,
    Placement,
    Servable,
    SignatureSpec,
    Tensors,
    deadline_exceeded,
    request_deadline,
)

_log = logging.getLogger(__name__)


def load_triton_python_model(
    model_class: type[Any], version_path: str, instance: int | None = None, *, warmup: bool = True
) -> Servable:
    """Completes the config of the model in ``version_path``'s parent, makes the model and
    initializes it as its instance ``instance`` (of its ``instance_group`` s); None: the
    whole model, as instance 0.  Each instance then runs the config's ``model_warmup``
    (``warmup`` False: not; ``--enable_model_warmup=false``).

    The whole of a model whose config sets ``sequence_batching`` (and is not decoupled) is
    made and initialized as each of its instances here, in this process, and served as one
    :class:`~servinglib.loaders.triton.sequence_servable.TritonSequenceServable`: its
    sequences stick to an instance.  (With model processes, each process loads one instance,
    ``instance``, and the server's process serves them so.)

    Raises InvalidArgumentError for a config that does not parse or that the model's
    ``auto_complete_config`` rejects, and the error of a failing ``initialize`` (a
    ServingError as it is, any other exception as UNKNOWN naming it).
    """
    model_dir = os.path.dirname(os.path.abspath(version_path))
    version_name = os.path.basename(os.path.normpath(version_path))
    if not version_name.isdigit():
        raise InvalidArgumentError(f"Version directory {version_path} is not named by a number")
    config = completed_config(model_class, model_dir)
    warn_unimplemented(config.message.name, config.source, not_implemented(config))
    message = config.message
    sequences = (
        message.HasField("sequence_batching") and not message.model_transaction_policy.decoupled
    )
    if instance is not None or not sequences:
        return _instance(model_class, config, model_dir, version_name, instance or 0, warmup)
    instances: list[TritonPythonServable] = []
    try:
        for index in range(instance_count(config)):
            instances.append(_instance(model_class, config, model_dir, version_name, index, warmup))
        return TritonSequenceServable(instances, config, model_dir, int(version_name))
    except BaseException:
        for loaded in instances:
            loaded.close()
        raise


def _instance(  # noqa: PLR0917 - the instance's parts
    model_class: type[Any],
    config: TritonModelConfig,
    model_dir: str,
    version: str,
    instance: int,
    warmup: bool,
) -> TritonPythonServable:
    args = initialize_args(config.message, model_dir, version, instance)
    try:
        model = model_class()
        initialize = getattr(model, "initialize", None)
        if initialize is not None:
            initialize(args)
    except Exception as exc:
        raise ServingError.wrap(exc, f"{CLASS_NAME}.initialize failed") from exc
    servable = TritonPythonServable(model, config, int(version), instance)
    if warmup and config.message.model_warmup:
        try:
            run_warmup(servable, config, model_dir)
        except BaseException:
            servable.close()
            raise
    return servable


@final
class TritonPythonServable(Servable):
    """A TritonPythonModel's ``execute`` as the signature ``serving_default``.

    One model instance: ``execute`` calls never overlap (a lock), as with Triton's one
    instance; a decoupled model's sender may go on sending after ``execute`` returned.
    Thread-safe.
    """

    def __init__(
        self,
        model: Any,  # noqa: ANN401 - the user's TritonPythonModel
        config: TritonModelConfig,
        version: int,
        instance: int = 0,
    ) -> None:
        self.model = model
        message = config.message
        inputs, outputs = tensor_specs(config)
        self._name = message.name
        self._version = version
        self._decoupled = message.model_transaction_policy.decoupled
        mode = execution_mode(config)
        self._spec = SignatureSpec(inputs, outputs, streaming=self._decoupled, execution_mode=mode)
        self._signatures = {DEFAULT_SIGNATURE: self._spec}
        self._output_names = [tensor.name for tensor in message.output]
        self._all_outputs = frozenset(self._output_names)
        self._message = message
        self._instance_name = instance_name(message, instance)
        self._execute_lock = threading.Lock()  # one instance: one execute() at a time
        # reshape: the model's shapes of the tensors that set one (after the batch dimension)
        self._batched = message.max_batch_size > 0
        self._input_reshapes = {
            t.name: tuple(t.reshape.shape) for t in message.input if t.HasField("reshape")
        }
        self._output_dims = {t.name: tuple(t.dims) for t in message.output if t.HasField("reshape")}
        self._batching = None if self._decoupled else request_batching(self, config, version)
        self._alone = (
            None
            if self._batching is not None or self._decoupled
            else InstanceThread(
                self._instance_name,
                inline=mode is ExecutionMode.INLINE,
                batch_dimension=self._batched,
            )
        )

    @property
    def signatures(self) -> Mapping[str, SignatureSpec]:
        return self._signatures

    def call(
        self, signature_name: str, inputs: Tensors, output_filter: frozenset[str] | None = None
    ) -> dict[str, npt.NDArray[Any]]:
        (outcome,) = self.execute_requests([self.pending(inputs, output_filter)])
        if isinstance(outcome, ServingError):
            raise outcome
        return outcome

    def pending(
        self, inputs: Tensors, output_filter: frozenset[str] | None = None
    ) -> PendingRequest:
        """One request for :meth:`execute_requests`, as a signature call gives it.

        Requires: ``inputs`` and ``output_filter`` were checked against the signature.
        """
        return self.pending_request(inputs, output_filter, request_extras(), request_deadline())

    def pending_request(
        self,
        inputs: Tensors,
        output_filter: frozenset[str] | None,
        extras: RequestExtras,
        deadline: float | None,
        *,
        also_wanted: frozenset[str] = frozenset(),
    ) -> PendingRequest:
        """One request for :meth:`execute_requests` of the request ``extras`` describes, which
        is cancelled once ``deadline`` (``time.monotonic()``; None: none) passes;
        ``also_wanted``: outputs to take from its response besides those it asks for.  The
        response's parameters go to the calling request's response extras (none: dropped).

        Requires: ``inputs`` and ``output_filter`` were checked against the signature.
        """
        self.check_batch_size(inputs)
        reply = _Reply()
        sender = InferenceResponseSender(reply.take, _past(deadline))
        wanted = output_filter or self._all_outputs
        if also_wanted:
            wanted |= also_wanted
        request = self._request(inputs, output_filter, sender, extras)
        return PendingRequest(request, reply, wanted, current_response_extras())

    def execute_requests(
        self, requests: Sequence[PendingRequest]
    ) -> list[dict[str, npt.NDArray[Any]] | ServingError]:
        """Runs ``execute`` once with ``requests``: each one's outputs, or its error.

        A response's TritonError fails its request only; an exception from ``execute``, or
        a result that is not one response per request, fails them all.
        """
        try:
            with self._execute_lock:
                returned = self.model.execute([pending.request for pending in requests])
                if inspect.iscoroutine(returned):  # async def execute: run here, to the end
                    returned = asyncio.run(returned)
        except Exception as exc:  # noqa: BLE001 - the model's failure fails its requests
            error = _execute_error(exc, self._instance_name)
            return [error for _ in requests]
        if returned is None:
            responses = [pending.reply.response() for pending in requests]
        elif isinstance(returned, list | tuple) and len(returned) == len(requests):
            responses = [_response_or_error(response) for response in returned]
        else:
            count = len(returned) if isinstance(returned, list | tuple) else type(returned)
            error = InternalError(
                f"{CLASS_NAME}.execute returned {count} responses for {len(requests)} requests"
            )
            return [error for _ in requests]
        return [
            self._reshaped(_outputs_or_error(response, pending.wanted, pending.response_extras))
            for response, pending in zip(responses, requests, strict=True)
        ]

    def call_stream(
        self, signature_name: str, inputs: Tensors, output_filter: frozenset[str] | None = None
    ) -> Iterator[dict[str, npt.NDArray[Any]]]:
        return self._stream(inputs, output_filter)

    def placement(self, signature_name: str) -> Placement | None:
        # dynamic_batching: requests gathered into execute()'s list; else one request at a
        # time, on the instance's own thread (``thread``) or where it is asked (``inline``)
        return self._batching or self._alone

    def batches_itself(self, signature_name: str) -> bool:
        return self._batching is not None

    def close(self) -> None:
        if self._batching is not None:
            self._batching.close()
        if self._alone is not None:
            self._alone.close()
        finalize = getattr(self.model, "finalize", None)
        if finalize is None:
            return
        try:
            finalize()
        except Exception:  # noqa: BLE001 - the version unloads anyway; the failure is logged
            _log.exception("Model %s version %d: finalize() failed", self._name, self._version)

    def _stream(
        self, inputs: Tensors, output_filter: frozenset[str] | None
    ) -> Iterator[dict[str, npt.NDArray[Any]]]:
        self.check_batch_size(inputs)
        sent: queue.SimpleQueue[tuple[InferenceResponse | None, bool]] = queue.SimpleQueue()
        ended = threading.Event()
        deadline = request_deadline()
        deadline_passed = _past(deadline)

        def cancelled() -> bool:
            return ended.is_set() or deadline_passed()

        sender = InferenceResponseSender(lambda r, final: sent.put((r, final)), cancelled)
        request = self._request(inputs, output_filter, sender, request_extras())
        wanted = output_filter or self._spec.outputs.keys()
        try:
            try:
                with self._execute_lock:
                    self.model.execute([request])
            except Exception as exc:
                raise _execute_error(exc, self._instance_name) from exc
            while True:
                response, final = _next_sent(sent, deadline)
                if response is not None:
                    part = self._reshaped(_outputs(_response_or_error(response), wanted))
                    if isinstance(part, ServingError):
                        raise part
                    yield part
                if final:
                    return
        finally:
            ended.set()  # the model's sender now says cancelled

    def _reshaped(
        self, outputs: dict[str, npt.NDArray[Any]] | ServingError
    ) -> dict[str, npt.NDArray[Any]] | ServingError:
        """The model's outputs in the client's shapes: an output with ``reshape`` takes its
        ``dims``."""
        dims = self._output_dims
        if not dims or isinstance(outputs, ServingError):
            return outputs
        try:
            return {
                name: _reshape(value, dims[name], self._batched) if name in dims else value
                for name, value in outputs.items()
            }
        except InvalidArgumentError as error:
            return InternalError(f"{CLASS_NAME}.execute's response: {error.message}")

    def check_batch_size(self, inputs: Tensors) -> None:
        """Raises InvalidArgumentError, as Triton, for a batch larger than ``max_batch_size``."""
        if self._batched:
            check_batch_size(self._message, inputs)

    def _request(
        self,
        inputs: Tensors,
        output_filter: frozenset[str] | None,
        sender: InferenceResponseSender,
        extras: RequestExtras,
    ) -> InferenceRequest:
        reshapes = self._input_reshapes
        return InferenceRequest.served(
            [
                Tensor(name, _reshape(value, reshapes[name], self._batched))
                if name in reshapes
                else Tensor(name, value)
                for name, value in inputs.items()
            ],
            sorted(output_filter) if output_filter else self._output_names,
            sender,
            model_name=self._name,
            model_version=self._version,
            request_id=extras.request_id,
            correlation_id=extras.correlation_id,
            parameters=extras.parameters,
        )


@final
class PendingRequest:
    """A request on its way to ``execute``: the model's InferenceRequest, what takes the
    response its sender sends, the outputs to answer, and where its response parameters go
    (None: nowhere).  Not changed once made, so thread-safe.  (A plain slotted class: one is
    made per request, and a frozen attrs class sets each field through ``object.__setattr__``.)"""

    __slots__ = ("reply", "request", "response_extras", "wanted")

    def __init__(
        self,
        request: InferenceRequest,
        reply: _Reply,
        wanted: frozenset[str],
        response_extras: ResponseExtras | None = None,
    ) -> None:
        self.request = request
        self.reply = reply
        self.wanted = wanted
        self.response_extras = response_extras


@final
class _Reply:
    """What a default-mode request's sender sent: at most one response.  Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._responses: list[InferenceResponse] = []  # guarded by: _lock

    def take(self, response: InferenceResponse | None, final: bool) -> None:
        del final  # a default-mode request ends with its execute() call
        if response is not None:
            with self._lock:
                self._responses.append(response)

    def response(self) -> InferenceResponse | ServingError:
        with self._lock:
            responses = list(self._responses)
        if len(responses) != 1:
            return InternalError(
                f"{CLASS_NAME}.execute returned None and sent {len(responses)} responses for a "
                "request (a model that is not decoupled sends exactly one)"
            )
        return _response_or_error(responses[0])


def _never() -> bool:
    return False


def _past(deadline: float | None) -> Callable[[], bool]:
    """Whether ``deadline`` (``time.monotonic()`` seconds; None: none) has passed, when asked."""
    if deadline is None:
        return _never
    return lambda: monotonic() >= deadline


def _next_sent(
    sent: queue.SimpleQueue[tuple[InferenceResponse | None, bool]], deadline: float | None
) -> tuple[InferenceResponse | None, bool]:
    if deadline is None:
        return sent.get()
    try:
        return sent.get(timeout=max(0.0, deadline - monotonic()))
    except queue.Empty:
        raise deadline_exceeded() from None


def _execute_error(exc: Exception, instance_name: str) -> ServingError:
    """The error of every request of an ``execute`` that raised ``exc`` (Triton's words)."""
    if isinstance(exc, ServingError):
        return exc
    error = InternalError(
        f"Failed to process the request(s) for model '{instance_name}', message: "
        f"{type(exc).__name__}: {exc}"
    )
    error.__cause__ = exc
    return error


def _response_or_error(response: object) -> InferenceResponse | ServingError:
    if not isinstance(response, InferenceResponse):
        return InternalError(
            f"{CLASS_NAME}.execute gave a {type(response).__name__}, not a "
            "pb_utils.InferenceResponse"
        )
    error = response.error()
    return error.as_serving_error() if error is not None else response


def _reshape(value: npt.NDArray[Any], shape: tuple[int, ...], batched: bool) -> npt.NDArray[Any]:
    """``value`` in ``shape`` (its batch dimension kept first), as Triton's ``reshape`` turns
    a tensor between the client's ``dims`` and the model's shape: their elements agree."""
    try:
        return value.reshape((*value.shape[:1], *shape) if batched else shape)
    except ValueError:
        raise InvalidArgumentError(
            f"A tensor of shape {list(value.shape)} cannot take the shape {list(shape)}"
        ) from None


def _outputs_or_error(
    outcome: InferenceResponse | ServingError,
    wanted: Iterable[str],
    response_extras: ResponseExtras | None,
) -> dict[str, npt.NDArray[Any]] | ServingError:
    if isinstance(outcome, ServingError):
        return outcome
    try:
        outputs = _outputs(outcome, wanted)
    except ServingError as error:
        return error
    parameters = response_parameters(outcome)
    if parameters and response_extras is not None:
        try:
            response_extras.set_parameters(parameters)
        except ValueError as error:
            return InternalError(f"{CLASS_NAME}.execute's response: {error}")
    return outputs


def _outputs(
    outcome: InferenceResponse | ServingError, wanted: Iterable[str]
) -> dict[str, npt.NDArray[Any]]:
    if isinstance(outcome, ServingError):
        raise outcome
    tensors = {tensor.name(): tensor.as_numpy() for tensor in outcome.output_tensors()}
    outputs = {}
    for name in wanted:
        if name not in tensors:
            raise InternalError(f"{CLASS_NAME}.execute's response has no output '{name}'")
        outputs[name] = _wire_array(tensors[name])
    return outputs


def _wire_array(array: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """``array`` as our front ends encode it: string tensors as object arrays of bytes."""
    if array.dtype.kind not in "OSU":
        return array
    return np.frompyfunc(_as_bytes, 1, 1)(array).astype(object)  # type: ignore[no-any-return]  # frompyfunc is untyped


def _as_bytes(item: object) -> bytes:
    return item if isinstance(item, bytes) else str(item).encode("utf-8")
