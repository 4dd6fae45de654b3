"""A Triton model's ``config.pbtxt``: parsed, completed as Triton does, mapped onto our objects.

:func:`read_model_config` parses the file with Triton's own field numbers
(``servinglib/protos/model_config.proto``) and lists the set fields servinglib
does not implement (the caller warns once, naming them); the other functions
map the fields it does implement:

- ``input``/``output`` (name, data_type, dims; -1 any size) -> :class:`TensorSpec`, after a
  leading -1 (the batch dimension) when ``max_batch_size`` > 0;
- ``version_policy`` -> :class:`ServableVersionPolicy`;
- ``instance_group`` (kind, count, name) -> :func:`instance_count`; KIND_GPU and GPU ids are
  refused, KIND_CPU, KIND_MODEL and KIND_AUTO (Triton's CPU without a GPU) accepted;
- ``dynamic_batching`` -> :class:`BatchingParameters`: ``max_batch_size`` as is,
  ``max_queue_delay_microseconds`` -> ``batch_timeout_s``, ``preferred_batch_size`` ->
  ``preferred_batch_sizes``, ``default_queue_policy.max_queue_size`` (requests) ->
  ``max_enqueued_batches`` (whole batches, rounded up; a Python model's queue counts
  requests, :mod:`servinglib.loaders.triton.request_batching`).

``name``, ``platform``, ``backend``, ``default_model_filename`` and
``parameters`` are read by the repository and the backends, ``response_cache``
by the server's response cache.  Everything
else that is set is listed in ``TritonModelConfig.unimplemented``: among
them ``preserve_ordering``, a SavedModel's queue timeouts and priorities (a Python
model's apply: :mod:`.batch_queue_policy`),
``sequence_batching`` (a Python model's is applied: :mod:`.sequence_servable`),
``ensemble_scheduling.max_inflight_requests`` (its steps are read by :mod:`.ensemble_graph`),
``model_warmup``, ``reshape`` and
``optional`` inputs (a Python model's apply all three: :mod:`.model_warmup`), ``decoupled``.
"""

from __future__ import annotations

import logging
import math
import os
import threading
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, TypeAlias, final

import attrs
import numpy as np
import numpy.typing as npt
from google.protobuf.message import Message

from servinglib.batching.options import BatchingParameters
from servinglib.codecs.dtypes import v2_datatype_to_numpy
from servinglib.errors import InvalidArgumentError
from servinglib.protos import model_config_pb2 as pb
from servinglib.protos.text_files import parse_text, read_text_file
from servinglib.servable import ExecutionMode, TensorSpec
from servinglib.sources.version_policy import ServableVersionPolicy

_log = logging.getLogger("servinglib.server")

CONFIG_FILE_NAME = "config.pbtxt"
_WHAT = "Triton model configuration"

# The fields servinglib acts on, as a tree of field names; True: the field and all inside it.
Tree: TypeAlias = "Mapping[str, bool | Tree]"
_TENSOR: Tree = {"name": True, "data_type": True, "dims": True}
_IMPLEMENTED: Tree = {
    "name": True,
    "platform": True,
    "backend": True,
    "version_policy": True,
    "max_batch_size": True,
    "input": _TENSOR,
    "output": _TENSOR,
    "dynamic_batching": {
        "max_queue_delay_microseconds": True,
        "preferred_batch_size": True,
        "default_queue_policy": {"max_queue_size": True},
    },
    "instance_group": {"name": True, "kind": True, "count": True, "gpus": True},
    "default_model_filename": True,
    "parameters": True,
    "ensemble_scheduling": {"step": True},  # the "ensemble" platform's
    "response_cache": True,  # the DataPlane's ResponseCaching (--cache_config)
}
# Triton's default_model_filename, by backend or platform, for those servinglib serves.
_DEFAULT_MODEL_FILENAMES = {"python": "model.py", "tensorflow_savedmodel": "model.savedmodel"}


@final
@attrs.frozen
class TritonModelConfig:
    """A parsed ``config.pbtxt``: the message, where it came from, and what is not implemented.

    ``unimplemented``: the set fields servinglib does not act on, as dotted
    paths ("dynamic_batching.preferred_batch_size"), each once, in field-number order.
    ``message`` must not be changed.  Thread-safe if it is not.
    """

    message: pb.ModelConfig
    source: str
    unimplemented: tuple[str, ...]


def read_model_config(model_dir: str | os.PathLike[str]) -> TritonModelConfig:
    """The ``config.pbtxt`` of the model directory ``model_dir``, completed as Triton does.

    Raises as :func:`~servinglib.protos.text_files.read_text_file` (NotFoundError when there
    is none), and InvalidArgumentError as :func:`parse_model_config`.
    """
    path = os.path.join(model_dir, CONFIG_FILE_NAME)
    model_name = os.path.basename(os.path.normpath(model_dir))
    return parse_model_config(read_text_file(path, _WHAT), model_name, source=path)


def parse_model_config(text: str, model_name: str, source: str = "") -> TritonModelConfig:
    """``text`` (a ``config.pbtxt``) of the model ``model_name``, completed as Triton does.

    Raises InvalidArgumentError naming ``source`` and the line for text that does not parse,
    and when the config's ``name`` is not ``model_name`` (Triton requires them to match).
    """
    message = parse_text(text, pb.ModelConfig(), _WHAT, source)
    if message.name and message.name != model_name:
        raise InvalidArgumentError(
            f"The {_WHAT} {source or '<text>'} names the model {message.name!r}, "
            f"but its directory is {model_name!r}"
        )
    return TritonModelConfig(complete(message, model_name), source, unimplemented_fields(message))


def unimplemented_fields(message: pb.ModelConfig) -> tuple[str, ...]:
    """The set fields of ``message`` servinglib does not act on (see :class:`TritonModelConfig`)."""
    return tuple(dict.fromkeys(unimplemented_paths(message, _IMPLEMENTED, "")))


def complete(message: pb.ModelConfig, model_name: str) -> pb.ModelConfig:
    """A copy of ``message`` with the defaults Triton fills in (``GET /v2/models/m/config``).

    The name (``model_name``), the latest version, the default model file of the python and
    tensorflow_savedmodel backends, and instance groups (but for an ensemble): one named after
    the model when there is none, else each named ``<model>_<index>`` unless named, with one
    instance unless counted, KIND_AUTO as KIND_CPU.  Triton's optimization defaults (pinned
    memory) are not filled: servinglib has no such thing.
    """
    done = pb.ModelConfig()
    done.CopyFrom(message)
    done.name = done.name or model_name
    if not done.HasField("version_policy"):
        done.version_policy.latest.num_versions = 1
    if not done.default_model_filename:
        done.default_model_filename = _DEFAULT_MODEL_FILENAMES.get(
            done.backend or done.platform, ""
        )
    if done.platform == "ensemble":
        done.model_transaction_policy.SetInParent()  # Triton shows {decoupled: false}
        return done
    if not done.instance_group:
        done.instance_group.add(name=done.name)
    for index, group in enumerate(done.instance_group):
        group.name = group.name or f"{done.name}_{index}"
        group.count = group.count or 1
        if group.kind == pb.ModelInstanceGroup.KIND_AUTO:
            group.kind = pb.ModelInstanceGroup.KIND_CPU  # Triton's choice without a GPU
    return done


def numpy_dtype(data_type: int) -> np.dtype[Any]:
    """The numpy dtype of Triton's ``data_type`` (TYPE_STRING: ``object``, of ``bytes``).

    Raises InvalidArgumentError for TYPE_INVALID and unknown numbers.
    """
    if data_type == pb.TYPE_STRING:
        return v2_datatype_to_numpy("BYTES")
    name = pb.DataType.Name(data_type) if data_type in pb.DataType.values() else ""
    if not name or data_type == pb.TYPE_INVALID:
        raise InvalidArgumentError(f"Triton data type {name or data_type} has no numpy dtype")
    return v2_datatype_to_numpy(name.removeprefix("TYPE_"))


def tensor_specs(
    config: TritonModelConfig,
) -> tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]:
    """The inputs' and outputs' specs: ``dims`` (-1: any size), after a -1 when batching; an
    input's ``optional``."""
    batch = (-1,) if config.message.max_batch_size > 0 else ()

    def spec(tensor: pb.ModelInput | pb.ModelOutput) -> TensorSpec:
        optional = isinstance(tensor, pb.ModelInput) and tensor.optional
        return TensorSpec(
            tensor.name,
            numpy_dtype(tensor.data_type),
            batch + tuple(tensor.dims),
            optional=optional,
        )

    return (
        tuple(spec(tensor) for tensor in config.message.input),
        tuple(spec(tensor) for tensor in config.message.output),
    )


def version_policy(config: TritonModelConfig) -> ServableVersionPolicy:
    """``version_policy`` as ours (unset: the latest version).

    Raises InvalidArgumentError for ``latest`` without versions or an empty ``specific``.
    """
    policy = config.message.version_policy
    which = policy.WhichOneof("policy_choice")
    if which == "all":
        return ServableVersionPolicy.all()
    if which == "specific":
        return ServableVersionPolicy.specific(policy.specific.versions)
    if which == "latest":
        return ServableVersionPolicy.latest(policy.latest.num_versions)
    return ServableVersionPolicy.latest()


def instance_count(config: TritonModelConfig) -> int:
    """How many instances of the model the ``instance_group`` entries ask for, in all.

    KIND_CPU, KIND_MODEL (the model places itself) and KIND_AUTO are accepted.  Raises
    InvalidArgumentError for KIND_GPU and for GPU ids: no GPU is configured.
    """
    total = 0
    for group in config.message.instance_group:
        if group.kind == pb.ModelInstanceGroup.KIND_GPU or group.gpus:
            raise InvalidArgumentError(
                f"Model {config.message.name!r}: instance_group {group.name!r} asks for a GPU "
                f"in {config.source or '<text>'}, but no GPU is configured"
            )
        total += group.count
    return total


EXECUTION_MODE_PARAMETER = "EXECUTION_MODE"
"""The model parameter (servinglib's; Triton passes it to the model and does nothing else) that
says where a Python model's ``execute`` runs: ``thread`` (the default: a worker thread, so a
slow ``execute`` never stalls the server) or ``inline`` (on the thread that asks, the event
loop too: for an ``execute`` of microseconds, which a thread hop would cost more than)."""


def execution_mode(config: TritonModelConfig) -> ExecutionMode:
    """Where the model's ``execute`` runs, as its ``EXECUTION_MODE`` parameter says.

    Raises InvalidArgumentError for a value other than ``thread`` and ``inline``, and for
    ``inline`` in a decoupled model (its responses are sent from threads of its own).
    """
    message = config.message
    parameter = message.parameters.get(EXECUTION_MODE_PARAMETER)
    text = "thread" if parameter is None else parameter.string_value.strip().lower()
    if text not in {"thread", "inline"}:
        raise InvalidArgumentError(
            f"Model {message.name!r}: parameter {EXECUTION_MODE_PARAMETER} must be 'thread' or "
            f"'inline', not {text!r:.40} in {config.source or '<text>'}"
        )
    if text == "inline" and message.model_transaction_policy.decoupled:
        raise InvalidArgumentError(
            f"Model {message.name!r}: a decoupled model cannot run inline "
            f"({EXECUTION_MODE_PARAMETER}) in {config.source or '<text>'}"
        )
    return ExecutionMode.INLINE if text == "inline" else ExecutionMode.THREAD


def batching_parameters(config: TritonModelConfig) -> BatchingParameters | None:
    """``dynamic_batching`` as our BatchingParameters; None when it is not set.

    Also None with ``max_batch_size`` 0: Triton then queues the requests but runs each alone.
    """
    message = config.message
    if not message.HasField("dynamic_batching") or message.max_batch_size < 1:
        return None
    dynamic = message.dynamic_batching
    parameters = BatchingParameters(
        max_batch_size=message.max_batch_size,
        batch_timeout_s=dynamic.max_queue_delay_microseconds / 1e6,
        preferred_batch_sizes=dynamic.preferred_batch_size,
    )
    queue_size = dynamic.default_queue_policy.max_queue_size
    if not queue_size:  # Triton's queue is unbounded; ours keeps its default bound
        return parameters
    return attrs.evolve(
        parameters, max_enqueued_batches=math.ceil(queue_size / message.max_batch_size)
    )


def unimplemented_paths(message: Message, implemented: Tree, prefix: str) -> Iterator[str]:
    """The dotted paths (after ``prefix``) of the set fields of ``message`` that the tree
    ``implemented`` (field names; True: the field and all inside it) does not hold."""
    for field, value in message.ListFields():
        rule = implemented.get(field.name, False)
        path = prefix + field.name
        if rule is True:
            continue
        if rule is False or field.message_type is None or field.message_type.GetOptions().map_entry:
            yield path
            continue
        items = value if field.is_repeated else [value]
        for item in items:
            yield from unimplemented_paths(item, rule, path + ".")


_warned_lock = threading.Lock()
_warned: set[tuple[str, str, str]] = set()  # guarded by: _warned_lock; (model, source, field)


def warn_unimplemented(model_name: str, source: str, fields: Iterable[str]) -> None:
    """Logs, once per model, config file and field in the process, the fields of a config
    that servinglib does not implement: whoever reads the config calls it, and a field
    another reader warned about already is not named again."""
    with _warned_lock:
        new = [f for f in fields if (model_name, source, f) not in _warned]
        _warned.update((model_name, source, f) for f in new)
    if new:
        _log.warning(
            "Model %s: %s sets fields servinglib does not implement, which have no effect: %s",
            model_name,
            source,
            ", ".join(new),
            extra={"model": model_name},
        )


def check_batch_size(message: pb.ModelConfig, inputs: Mapping[str, npt.NDArray[Any]]) -> None:
    """Raises InvalidArgumentError, as Triton, for a batch larger than the model's
    ``max_batch_size`` (0: not batched, nothing to check)."""
    limit = message.max_batch_size
    if not limit:
        return
    for value in inputs.values():
        if value.ndim and value.shape[0] > limit:
            raise InvalidArgumentError(
                f"inference request batch-size must be <= {limit} for '{message.name}'"
            )
