"""tf.Example ⇄ plain Python: a mapping of feature name → list of bytes, floats or ints.

Type rules of :func:`make_example`, per feature:

- ``bytes`` and ``str`` (encoded as UTF-8) → ``bytes_list``;
- ``float`` (and numpy floating scalars) → ``float_list``, rounded to float32 as the wire holds;
- ``int`` and ``bool`` (and numpy integer and bool scalars) → ``int64_list``;
- a value is one such scalar, or a sequence or numpy array (flattened) of them, all of one kind:
  mixing kinds (e.g. ``[1, 2.5]``) is an error rather than a silent conversion;
- an empty sequence → a Feature with no kind, which TensorFlow reads as an empty list of any
  type.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt

from servinglib.errors import InvalidArgumentError
from servinglib.protos import example_pb2, input_pb2

FeatureScalar: TypeAlias = bytes | str | float | int | bool | np.generic
"""One value of a feature."""
FeatureInput: TypeAlias = FeatureScalar | Sequence[FeatureScalar] | npt.NDArray[Any]
"""What :func:`make_example` takes for one feature: a scalar, a sequence or an array."""
FeatureValues: TypeAlias = list[bytes] | list[float] | list[int]
"""What :func:`features_of` gives for one feature."""

_BYTES = "bytes_list"
_FLOAT = "float_list"
_INT64 = "int64_list"


def features_of(example: example_pb2.Example) -> dict[str, FeatureValues]:
    """The features of ``example`` by name (sorted), each as the list its kind holds.

    A feature with no kind set gives an empty list.
    """
    features: dict[str, FeatureValues] = {}
    for name in sorted(example.features.feature):
        feature = example.features.feature[name]
        kind = feature.WhichOneof("kind")
        if kind == _BYTES:
            features[name] = list(feature.bytes_list.value)
        elif kind == _FLOAT:
            features[name] = list(feature.float_list.value)
        elif kind == _INT64:
            features[name] = list(feature.int64_list.value)
        else:
            features[name] = []
    return features


def make_example(features: Mapping[str, FeatureInput]) -> example_pb2.Example:
    """An Example holding ``features``, each kind inferred by the rules in the module docstring.

    Raises InvalidArgumentError naming the feature for a value of no supported type, for mixed
    kinds in one feature, and for an int outside int64's range.
    """
    example = example_pb2.Example()
    example.features.SetInParent()  # present even when empty, as tf.train.Features(...) writes
    for name, value in features.items():
        feature = example.features.feature[name]
        values = _as_list(value)
        if not values:
            continue
        kind = _kind_of(name, values)
        try:
            if kind == _BYTES:
                feature.bytes_list.value.extend(
                    item.encode("utf-8") if isinstance(item, str) else item for item in values
                )
            elif kind == _FLOAT:
                feature.float_list.value.extend(values)
            else:
                # bools as ints: protobuf deprecates bools in int fields (rejected from 7.34).
                feature.int64_list.value.extend(int(item) for item in values)
        except (ValueError, TypeError) as error:
            raise InvalidArgumentError(f"Feature {name!r}: {error}") from error
    return example


def serialize_examples(
    examples: Sequence[example_pb2.Example], context: example_pb2.Example | None = None
) -> npt.NDArray[Any]:
    """Each example serialized, ``context``'s features merged in: an object array [n] of bytes.

    What TF Serving's classify and regress feed a signature, for an
    ``ExampleList`` (no context) or an ``ExampleListWithContext``: the
    serialized context followed by the serialized example, which protobuf
    parses as one Example holding the features of both, the example's
    winning for a name in both (a later map entry replaces an earlier one).
    """
    prefix = context.SerializeToString() if context is not None else b""
    serialized = np.empty(len(examples), dtype=object)
    serialized[:] = [prefix + example.SerializeToString() for example in examples]
    return serialized


def serialize_input(model_input: input_pb2.Input) -> npt.NDArray[Any]:
    """The examples of a TF Serving ``Input``, serialized by :func:`serialize_examples`.

    TF Serving's ``InputToSerializedExampleTensor``: an ``example_list``'s
    examples as they are, an ``example_list_with_context``'s each preceded by
    the context.  Raises InvalidArgumentError for an Input of neither kind.
    """
    kind = model_input.WhichOneof("kind")
    if kind == "example_list":
        return serialize_examples(model_input.example_list.examples)
    if kind == "example_list_with_context":
        with_context = model_input.example_list_with_context
        return serialize_examples(with_context.examples, with_context.context)
    raise InvalidArgumentError("Input is empty: set example_list or example_list_with_context")


def _as_list(value: FeatureInput) -> list[Any]:
    """``value``'s elements as Python scalars (numpy scalars and arrays converted)."""
    if isinstance(value, np.ndarray):
        elements: list[Any] = value.ravel().tolist()
        return elements
    if isinstance(value, (bytes, str, np.generic)) or not isinstance(value, Sequence):
        value = [value]
    return [item.item() if isinstance(item, np.generic) else item for item in value]


def _kind_of(name: str, values: list[Any]) -> str:
    kinds = {_kind_of_element(name, item) for item in values}
    if len(kinds) > 1:
        found = ", ".join(sorted(kinds))
        raise InvalidArgumentError(
            f"Feature {name!r} mixes value types ({found}); a feature holds one kind"
        )
    return kinds.pop()


def _kind_of_element(name: str, item: object) -> str:
    if isinstance(item, (bytes, str)):
        return _BYTES
    if isinstance(item, float):
        return _FLOAT
    if isinstance(item, int):  # bool included: TensorFlow stores bools as int64
        return _INT64
    raise InvalidArgumentError(
        f"Feature {name!r} has a value of type {type(item).__name__};"
        " expected bytes, str, float, int or bool"
    )
