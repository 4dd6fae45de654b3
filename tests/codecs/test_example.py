"""Tests for servinglib.codecs.example: tf.Example ⇄ a mapping of feature name → list."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given
from hypothesis import strategies as st

from servinglib.codecs.example import (
    features_of,
    make_example,
    serialize_examples,
    serialize_input,
)
from servinglib.errors import InvalidArgumentError
from servinglib.protos import example_pb2, input_pb2

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
FLOAT32 = st.floats(width=32, allow_nan=False)
FEATURE_LISTS = st.one_of(
    st.lists(st.binary(max_size=8), min_size=1, max_size=4),
    st.lists(FLOAT32, min_size=1, max_size=4),
    st.lists(INT64, min_size=1, max_size=4),
)
FEATURES = st.dictionaries(st.text(min_size=1, max_size=6), FEATURE_LISTS, max_size=5)


@given(features=FEATURES)
def test_features_round_trip(features: dict[str, list[Any]]) -> None:
    """make_example then features_of gives back lists of bytes, float32 floats and int64s."""
    example = example_pb2.Example.FromString(make_example(features).SerializeToString())

    assert features_of(example) == dict(sorted(features.items()))


@pytest.mark.parametrize(
    ("value", "kind", "expected"),
    [
        (b"raw", "bytes_list", [b"raw"]),
        ("héllo", "bytes_list", ["héllo".encode()]),
        ([b"a", "b"], "bytes_list", [b"a", b"b"]),
        (2.5, "float_list", [2.5]),
        ([0.1], "float_list", [np.float32(0.1).item()]),
        (np.float64(1.5), "float_list", [1.5]),
        (3, "int64_list", [3]),
        (True, "int64_list", [1]),
        ([np.int32(4), np.bool_(False)], "int64_list", [4, 0]),
        (np.array([[1, 2], [3, 4]]), "int64_list", [1, 2, 3, 4]),
        (np.array([0.5, 1.5], np.float32), "float_list", [0.5, 1.5]),
        (np.array([b"x", b"y"]), "bytes_list", [b"x", b"y"]),
        ((1, 2), "int64_list", [1, 2]),
    ],
)
def test_kind_is_inferred_from_the_values(value: Any, kind: str, expected: list[Any]) -> None:
    """bytes/str → bytes_list, float → float_list (float32), int/bool → int64_list; any shape."""
    feature = make_example({"f": value}).features.feature["f"]

    assert feature.WhichOneof("kind") == kind
    assert list(getattr(feature, kind).value) == expected


def test_empty_list_gives_a_feature_without_kind() -> None:
    """An empty value is a Feature with no kind set, which features_of reads as []."""
    example = make_example({"empty": []})

    assert example.features.feature["empty"].WhichOneof("kind") is None
    assert features_of(example) == {"empty": []}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ([1, 2.5], r"mixes value types \(float_list, int64_list\)"),
        ([b"a", 1], r"mixes value types \(bytes_list, int64_list\)"),
        ([None], "has a value of type NoneType"),
        ({"nested": 1}, "has a value of type dict"),
        ([[1, 2]], "has a value of type list"),
        (2**63, "Feature 'f'"),
    ],
)
def test_invalid_values_are_rejected_naming_the_feature(value: Any, message: str) -> None:
    """Mixed kinds, unsupported types and ints beyond int64 raise InvalidArgumentError."""
    with pytest.raises(InvalidArgumentError, match=message):
        make_example({"f": value})


def test_features_are_sorted_by_name() -> None:
    """features_of lists the features in name order, whatever order the map holds them."""
    features = features_of(make_example({"b": 1, "a": 2.0, "c": b"z"}))

    assert list(features) == ["a", "b", "c"]


def test_tensorflow_reads_our_example() -> None:
    """tf.train.Example parses our bytes, and tf.io.parse_example reads each feature's values."""
    data = make_example({"name": "x", "scores": [0.5, 1.5], "ids": [1, 2, 3]}).SerializeToString()

    theirs = tf.train.Example.FromString(data)
    parsed = tf.io.parse_single_example(
        data,
        {
            "name": tf.io.FixedLenFeature([], tf.string),
            "scores": tf.io.FixedLenFeature([2], tf.float32),
            "ids": tf.io.VarLenFeature(tf.int64),
        },
    )

    assert list(theirs.features.feature["ids"].int64_list.value) == [1, 2, 3]
    assert parsed["name"].numpy() == b"x"
    assert parsed["scores"].numpy().tolist() == [0.5, 1.5]
    assert parsed["ids"].values.numpy().tolist() == [1, 2, 3]


def test_we_read_tensorflows_example() -> None:
    """features_of reads a tf.train.Example built by TensorFlow's own classes."""
    theirs = tf.train.Example(
        features=tf.train.Features(
            feature={
                "bytes": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"a", b"b"])),
                "floats": tf.train.Feature(float_list=tf.train.FloatList(value=[0.25])),
                "ints": tf.train.Feature(int64_list=tf.train.Int64List(value=[-1, 2**62])),
            }
        )
    )

    ours = example_pb2.Example.FromString(theirs.SerializeToString())

    assert features_of(ours) == {"bytes": [b"a", b"b"], "floats": [0.25], "ints": [-1, 2**62]}


@given(features=FEATURES)
def test_our_bytes_equal_tensorflows_for_the_same_features(features: dict[str, list[Any]]) -> None:
    """Our Example serializes to the bytes of TensorFlow's Example with the same features."""
    feature_map = {}
    for name, values in features.items():
        if isinstance(values[0], bytes):
            feature_map[name] = tf.train.Feature(bytes_list=tf.train.BytesList(value=values))
        elif isinstance(values[0], float):
            feature_map[name] = tf.train.Feature(float_list=tf.train.FloatList(value=values))
        else:
            feature_map[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=values))
    theirs = tf.train.Example(features=tf.train.Features(feature=feature_map))

    ours = make_example(features)

    assert ours.SerializeToString(deterministic=True) == theirs.SerializeToString(
        deterministic=True
    )


def test_serialize_examples_merges_the_context_and_the_example_wins() -> None:
    """With a context, each serialized example holds both feature sets; the example's win."""
    context = make_example({"lang": "en", "shared": 1})
    examples = [make_example({"x": 1.5, "shared": 2}), make_example({"x": 2.5})]
    serialized = serialize_examples(examples, context)
    assert serialized.dtype == object
    assert serialized.shape == (2,)
    merged = [features_of(example_pb2.Example.FromString(item)) for item in serialized]
    assert merged[0] == {"lang": [b"en"], "shared": [2], "x": [1.5]}
    assert merged[1] == {"lang": [b"en"], "shared": [1], "x": [2.5]}
    alone = serialize_examples(examples)
    assert features_of(example_pb2.Example.FromString(alone[1])) == {"x": [2.5]}


def test_serialize_input_gives_tf_servings_bytes_for_each_kind() -> None:
    """An Input's examples are serialized as they are, or each after the context's bytes."""
    context, example = make_example({"lang": "en"}), make_example({"x": 1.5})
    listed = input_pb2.Input()
    listed.example_list.examples.append(example)
    with_context = input_pb2.Input()
    with_context.example_list_with_context.context.CopyFrom(context)
    with_context.example_list_with_context.examples.append(example)

    assert list(serialize_input(listed)) == [example.SerializeToString()]
    assert list(serialize_input(with_context)) == [
        context.SerializeToString() + example.SerializeToString()
    ]
    with pytest.raises(InvalidArgumentError, match="Input is empty"):
        serialize_input(input_pb2.Input())
