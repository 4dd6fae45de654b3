"""A Triton Python model's configuration: completed, as Triton's JSON, and ``initialize``'s args.

:func:`completed_config` reads the model's ``config.pbtxt`` (none is allowed) and runs the
model's ``auto_complete_config`` on it, as Triton does with auto-complete on (its default).
"""

from __future__ import annotations

import json
import os
from typing import Any

from google.protobuf import json_format
from google.protobuf.descriptor import FieldDescriptor

from servinglib.errors import InvalidArgumentError, NotFoundError
from servinglib.loaders.triton.config import (
    Tree,
    TritonModelConfig,
    complete,
    parse_model_config,
    read_model_config,
    unimplemented_fields,
    unimplemented_paths,
)
from servinglib.loaders.triton.pb_model_config import ModelConfig
from servinglib.protos import model_config_pb2 as pb

CLASS_NAME = "TritonPythonModel"
"""The class a Triton Python-backend ``model.py`` defines."""

# Fields config.py lists as not implemented that Triton Python models implement.
# A Python model's own: its transaction policy, optional inputs, reshapes, and its dynamic
# batcher's priority levels and queue policies (:mod:`.batch_queue_policy`).
_IMPLEMENTED_HERE = (
    "model_transaction_policy",
    "input.optional",
    "model_warmup",
    "input.reshape",
    "output.reshape",
    "dynamic_batching.default_queue_policy",
    "dynamic_batching.priority_levels",
    "dynamic_batching.default_priority_level",
    "dynamic_batching.priority_queue_policy",
)


def completed_config(model_class: type[Any], model_dir: str) -> TritonModelConfig:
    """The model's config: its config.pbtxt (or none), then its ``auto_complete_config``."""
    try:
        config = read_model_config(model_dir)
    except NotFoundError:
        name = os.path.basename(model_dir)
        config = parse_model_config('backend: "python"', name, source=f"{model_dir} (no config)")
    auto_complete = getattr(model_class, "auto_complete_config", None)
    if auto_complete is None:
        return config
    try:
        completed = auto_complete(ModelConfig(config_json(config.message)))
    except Exception as exc:
        raise InvalidArgumentError(
            f"{CLASS_NAME}.auto_complete_config of model {config.message.name!r} failed: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(completed, ModelConfig):
        raise InvalidArgumentError(
            f"{CLASS_NAME}.auto_complete_config of model {config.message.name!r} returned "
            f"{type(completed).__name__}, not the pb_utils.ModelConfig it was given"
        )
    try:
        message = json_format.ParseDict(completed.as_dict(), pb.ModelConfig())
    except json_format.ParseError as exc:
        raise InvalidArgumentError(
            f"{CLASS_NAME}.auto_complete_config of model {config.message.name!r} made a "
            f"config that is not valid: {exc}"
        ) from exc
    return TritonModelConfig(
        complete(message, config.message.name), config.source, unimplemented_fields(message)
    )


def config_json(message: pb.ModelConfig) -> str:
    """``message`` as Triton's JSON: field names as in the proto, unset fields included,
    64-bit integers as numbers."""
    as_dict = json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    return json.dumps(_numbers(as_dict, message.DESCRIPTOR))


def _numbers(value: Any, descriptor: Any) -> Any:  # noqa: ANN401 - a JSON value and its message's descriptor
    """``value`` with the 64-bit integer fields ``MessageToDict`` wrote as strings as numbers."""
    for field in descriptor.fields:
        if field.name not in value:
            continue
        item = value[field.name]
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            entry = field.message_type.fields_by_name["value"]
            if entry.message_type is not None:
                value[field.name] = {k: _numbers(v, entry.message_type) for k, v in item.items()}
        elif field.message_type is not None:
            items = item if isinstance(item, list) else [item]
            for sub in items:
                _numbers(sub, field.message_type)
        elif field.cpp_type in _INT64_TYPES:
            value[field.name] = [int(v) for v in item] if isinstance(item, list) else int(item)
    return value


_INT64_TYPES = (FieldDescriptor.CPPTYPE_INT64, FieldDescriptor.CPPTYPE_UINT64)


def not_implemented(config: TritonModelConfig) -> list[str]:
    """The set fields a Triton Python model's config asks for that servinglib does not apply:
    config.py's list but for the transaction policy (decoupled models are served); instance
    counts are applied (a model process each, :mod:`servinglib.loaders.instances`), and
    dynamic batching by the model's placement (:mod:`servinglib.loaders.triton.request_batching`:
    its priority levels and queue policies too, but ``preserve_ordering``),
    but for a decoupled model, whose requests each run alone; so is sequence batching (but
    ``iterative_sequence``, ``oldest.preserve_ordering`` and the state's buffer options), but
    for a decoupled model."""
    fields = [name for name in config.unimplemented if not name.startswith(_IMPLEMENTED_HERE)]
    message = config.message
    decoupled = message.model_transaction_policy.decoupled
    if message.HasField("dynamic_batching") and decoupled:
        fields.append("dynamic_batching")
    if message.HasField("sequence_batching") and not decoupled:
        fields.remove("sequence_batching")
        fields += unimplemented_paths(
            message.sequence_batching, _SEQUENCE_BATCHING_HERE, "sequence_batching."
        )
    return fields


# The sequence_batching fields a Triton Python model's sequence batcher applies
# (:mod:`servinglib.loaders.triton.sequence_servable`).
_SEQUENCE_BATCHING_HERE: Tree = {
    "direct": True,
    "oldest": {
        "max_candidate_sequences": True,
        "preferred_batch_size": True,
        "max_queue_delay_microseconds": True,
    },
    "max_sequence_idle_microseconds": True,
    "control_input": True,
    "state": {
        "input_name": True,
        "output_name": True,
        "data_type": True,
        "dims": True,
        "initial_state": True,
    },
}


def instance_name(config: pb.ModelConfig, instance: int = 0) -> str:
    """The name of the model's instance ``instance`` (counted across its groups in order):
    its group's name, then ``_<i>`` within the group, as Triton names it."""
    index = instance
    for group in config.instance_group:
        if index < max(1, group.count):
            return f"{group.name}_{index}"
        index -= max(1, group.count)
    group_name = config.instance_group[0].name if config.instance_group else config.name
    return f"{group_name}_{instance}"


def initialize_args(
    config: pb.ModelConfig, model_dir: str, version: str, instance: int = 0
) -> dict[str, str]:
    """Triton's ``initialize`` args for the model's instance ``instance`` (all strings)."""
    return {
        "model_config": config_json(config),
        "model_instance_kind": "CPU",
        "model_instance_name": instance_name(config, instance),
        "model_instance_device_id": "0",
        "model_repository": model_dir,
        "model_version": version,
        "model_name": config.name,
    }
