"""A Triton model configuration as the JSON object Triton answers ``GET .../config`` with."""

from __future__ import annotations

from typing import Any, cast

from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

# protobuf's JSON writes these as strings; Triton writes them as numbers.
_INTEGERS_AS_TEXT = frozenset(
    {
        FieldDescriptor.TYPE_INT64,
        FieldDescriptor.TYPE_UINT64,
        FieldDescriptor.TYPE_SINT64,
        FieldDescriptor.TYPE_FIXED64,
        FieldDescriptor.TYPE_SFIXED64,
    }
)


def model_config_json(config: Message) -> dict[str, Any]:
    """``config`` (a ``servinglib.triton.ModelConfig``) as Triton's JSON.

    Triton's field names, every field with no presence printed (its defaults
    included), enums by name, and 64-bit integers as numbers (protobuf's
    JSON has them as strings; Triton turns them back).
    """
    fields = json_format.MessageToDict(
        config, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    return _numbers(fields, cast(Descriptor, config.DESCRIPTOR))


def _numbers(fields: dict[str, Any], descriptor: Descriptor) -> dict[str, Any]:
    for name, value in fields.items():
        field = descriptor.fields_by_name.get(name)
        if field is None:
            continue
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            for key, item in value.items():
                value[key] = _value(item, value_field)
        elif field.is_repeated:
            fields[name] = [_value(item, field) for item in value]
        else:
            fields[name] = _value(value, field)
    return fields


def _value(value: Any, field: FieldDescriptor) -> Any:  # noqa: ANN401 - a JSON value
    if field.message_type is not None and isinstance(value, dict):
        return _numbers(value, field.message_type)
    if field.type in _INTEGERS_AS_TEXT and isinstance(value, str):
        return int(value)
    return value
