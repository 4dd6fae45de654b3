"""Tests for zero_inputs and the result comparison behind check_loader's concurrent-calls check."""

from __future__ import annotations

import numpy as np

from servinglib.servable import SignatureSpec, TensorSpec
from servinglib.testing import zero_inputs
from servinglib.testing._concurrent_calls import same_result


def test_zero_inputs_fit_the_specs() -> None:
    """Unknown sizes become 1, unknown ranks a vector of one, strings b"", dtypes kept."""
    spec = SignatureSpec(
        [
            TensorSpec("ids", "int64", [-1, 3]),
            TensorSpec("any", "float32", None),
            TensorSpec("text", object, [2]),
            TensorSpec("flag", "bool", []),
        ],
        [TensorSpec("y", "float32", [-1])],
    )

    inputs = zero_inputs(spec)

    assert {name: (a.dtype, a.shape) for name, a in inputs.items()} == {
        "ids": (np.dtype("int64"), (1, 3)),
        "any": (np.dtype("float32"), (1,)),
        "text": (np.dtype(object), (2,)),
        "flag": (np.dtype(bool), ()),
    }
    assert inputs["ids"].tolist() == [[0, 0, 0]]
    assert inputs["text"].tolist() == [b"", b""]
    for name, value in inputs.items():
        spec.inputs[name].check(value)


def test_same_result_compares_outputs_by_dtype_shape_and_value() -> None:
    """Outputs match only with the same keys, dtypes, shapes and values (NaN equals NaN)."""
    nan = {"y": np.array([np.nan, 1.0])}

    assert same_result(nan, {"y": np.array([np.nan, 1.0])})
    assert not same_result(nan, {"y": np.array([np.nan, 2.0])})
    assert not same_result(nan, {"y": np.array([np.nan, 1.0], np.float32)})
    assert not same_result(nan, {"z": np.array([np.nan, 1.0])})
    assert same_result({"s": np.array([b"a"], object)}, {"s": np.array([b"a"], object)})
    assert same_result(3, 3)
    assert not same_result(3, "3")
