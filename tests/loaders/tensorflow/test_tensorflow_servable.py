"""TensorFlowServable: signatures called with numpy in and out, through call_signature."""

from __future__ import annotations

import concurrent.futures
from pathlib import Path

import numpy as np
import pytest
from saved_model_builders import CLASSES, REGRESS, load, serialized_examples

from servinglib.errors import FailedPreconditionError, InvalidArgumentError
from servinglib.loaders.tensorflow import tensorflow_servable
from servinglib.servable import call_signature


def test_float_signatures(dtypes_model: Path) -> None:
    """float32 and float64 inputs give outputs of the same dtypes and values."""
    _, servable = load(dtypes_model)
    out = call_signature(
        servable,
        "floats",
        {"f32": np.array([1.5, -2], np.float32), "f64": np.array([3.0], np.float64)},
    )
    assert out["f32_doubled"].dtype == np.float32
    np.testing.assert_array_equal(out["f32_doubled"], [3.0, -4.0])
    assert out["f64_halved"].dtype == np.float64
    np.testing.assert_array_equal(out["f64_halved"], [1.5])


def test_int_signatures(dtypes_model: Path) -> None:
    """int32 and int64 tensors keep their dtypes, including values beyond 32 bits."""
    _, servable = load(dtypes_model)
    out = call_signature(
        servable,
        "ints",
        {"i32": np.array([1, 2], np.int32), "i64": np.array([3_000_000_000], np.int64)},
    )
    assert out["i32_plus_one"].dtype == np.int32
    assert out["i32_plus_one"].tolist() == [2, 3]
    assert out["i64_squared"].dtype == np.int64
    assert out["i64_squared"].tolist() == [9_000_000_000_000_000_000]


def test_bool_signature_and_scalar_output(dtypes_model: Path) -> None:
    """bool tensors round-trip, and a scalar output is a 0-d array, not a numpy scalar."""
    _, servable = load(dtypes_model)
    out = call_signature(servable, "bools", {"flags": np.array([True, False])})
    assert out["negated"].tolist() == [False, True]
    assert isinstance(out["any"], np.ndarray)
    assert out["any"].shape == ()
    assert out["any"].dtype == np.bool_
    assert bool(out["any"])


def test_string_signature_takes_and_returns_bytes_objects(dtypes_model: Path) -> None:
    """String tensors are object arrays of bytes both ways, a string scalar a 0-d one."""
    _, servable = load(dtypes_model)
    words = np.array([b"abc", "é".encode(), b""], dtype=object)
    out = call_signature(servable, "strings", {"words": words})
    assert out["shouted"].dtype == np.dtype(object)
    assert out["shouted"].tolist() == [b"ABC!", "é".encode() + b"!", b"!"]
    assert out["lengths"].tolist() == [3, 2, 0]
    assert out["first"].shape == ()
    assert out["first"].dtype == np.dtype(object)
    assert out["first"].item() == b"abc"


def test_unknown_rank_and_fixed_dims(dtypes_model: Path) -> None:
    """An unknown-rank input takes any shape; a [-1, 3] input and a scalar work as declared."""
    _, servable = load(dtypes_model)
    anything = np.ones((2, 2, 2), np.float32)
    out = call_signature(
        servable,
        "shapes",
        {
            "anything": anything,
            "rows": np.arange(6, dtype=np.float32).reshape(2, 3),
            "scalar": np.array(41, np.int64),
        },
    )
    np.testing.assert_array_equal(out["anything"], anything)
    assert out["row_sums"].tolist() == [3.0, 12.0]
    assert out["scalar"].item() == 42


def test_inputs_reach_the_parameters_they_are_named_for(dtypes_model: Path) -> None:
    """Several inputs are passed by name, whatever order the function declares them in."""
    _, servable = load(dtypes_model)
    out = call_signature(
        servable,
        "difference",
        {"alpha": np.array([1.0], np.float32), "zeta": np.array([10.0], np.float32)},
    )
    assert out["zeta_minus_alpha"].tolist() == [9.0]


def test_tf1_saved_model_predicts_and_regresses(tf1_model: Path) -> None:
    """A SavedModel from TF 1's SavedModelBuilder serves its predict and regress signatures."""
    _, servable = load(tf1_model)
    regress = servable.signatures["regress_x_to_y"]
    assert regress.method_name == REGRESS
    assert regress.inputs["inputs"].tensor_name == "tf_example:0"
    out = call_signature(
        servable,
        None,
        {"zeta": np.array([10.0], np.float32), "alpha": np.array([1.0], np.float32)},
    )
    assert out["difference"].tolist() == [11.0]
    examples = {"inputs": serialized_examples(x=[4.0])}
    assert call_signature(servable, "regress_x_to_y", examples)["outputs"].tolist() == [[4.0]]


@pytest.mark.parametrize("model", ["dtypes_model", "tf1_model"])
def test_fast_path_serves_tf2_and_tf1_signatures(
    model: str, request: pytest.FixtureRequest
) -> None:
    """Signatures of TF 2 and TF 1 SavedModels are all called through TF's flat entry point."""
    _, servable = load(request.getfixturevalue(model))
    assert all(bound.call_flat is not None for bound in servable._functions.values())


def test_public_call_path_gives_the_same_results(
    dtypes_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where TF's flat entry point cannot be used, calls take the public path with equal results."""
    _, fast = load(dtypes_model)
    monkeypatch.setattr(tensorflow_servable, "_flat_call", lambda function, spec: None)
    _, public = load(dtypes_model)
    assert all(bound.call_flat is None for bound in public._functions.values())
    requests = {
        "difference": {"alpha": np.array([1.0], np.float32), "zeta": np.array([3.0], np.float32)},
        "strings": {"words": np.array([b"ab", b"c"], dtype=object)},
        "bools": {"flags": np.array([True])},
    }
    for name, inputs in requests.items():
        expected = call_signature(fast, name, inputs)
        got = call_signature(public, name, inputs)
        assert {k: v.tolist() for k, v in got.items()} == {
            k: v.tolist() for k, v in expected.items()
        }
    for servable in (fast, public):
        with pytest.raises(InvalidArgumentError, match="x must be > 0"):
            call_signature(servable, "positive_only", {"x": np.array([-1.0], np.float32)})


def test_servable_call_without_an_input_is_invalid_argument(dtypes_model: Path) -> None:
    """Called directly, without call_signature's checks, a missing input is still named."""
    _, servable = load(dtypes_model)
    with pytest.raises(InvalidArgumentError, match="Missing input tensor 'zeta'"):
        servable.call("difference", {"alpha": np.array([1.0], np.float32)})


def test_output_filter_returns_only_the_requested_outputs(dtypes_model: Path) -> None:
    """With an output filter, only the named outputs come back."""
    _, servable = load(dtypes_model)
    words = np.array([b"a"], dtype=object)
    out = call_signature(servable, "strings", {"words": words}, output_filter=["lengths"])
    assert list(out) == ["lengths"]
    with pytest.raises(InvalidArgumentError, match="Unknown output tensor 'nope'"):
        call_signature(servable, "strings", {"words": words}, output_filter=["nope"])


def test_classify_on_serialized_examples(examples_model: Path) -> None:
    """A classify signature takes serialized tf.Examples and returns scores and classes."""
    _, servable = load(examples_model)
    out = call_signature(servable, "classify_x", {"inputs": serialized_examples(x=[0.0, -4.0])})
    high = 1 / (1 + np.exp(-np.array([2.0, 0.0])))
    np.testing.assert_allclose(out["scores"], np.stack([1 - high, high], axis=1), rtol=1e-6)
    assert out["classes"].tolist() == [CLASSES, CLASSES]


def test_regress_on_serialized_examples(examples_model: Path) -> None:
    """A regress signature takes serialized tf.Examples and returns one output per example."""
    _, servable = load(examples_model)
    out = call_signature(servable, "regress_x", {"inputs": serialized_examples(x=[1.0, 2.0, 5.0])})
    assert out["outputs"].tolist() == [[2.5], [3.0], [4.5]]


def test_example_missing_its_feature_is_invalid_argument(examples_model: Path) -> None:
    """A tf.Example without the required feature fails with TF's parse error as INVALID_ARGUMENT."""
    _, servable = load(examples_model)
    with pytest.raises(InvalidArgumentError, match="x"):
        call_signature(servable, "regress_x", {"inputs": serialized_examples(other=[1.0])})


def test_keras_models_give_keras_outputs(keras_models: dict[str, Path | np.ndarray]) -> None:
    """Both Keras exports serve what the Keras model computes."""
    batch = keras_models["batch"]
    for kind, input_name in [("export", "features"), ("saved_model", "inputs")]:
        _, servable = load(keras_models[kind])
        out = call_signature(servable, None, {input_name: batch})
        np.testing.assert_allclose(out["output_0"], keras_models["expected"], rtol=1e-5)


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ({"x": np.zeros(2, np.float64)}, r"'x' has dtype float64, but .* expects float32"),
        ({"x": np.zeros((2, 1), np.float32)}, r"'x' has shape \[2, 1\], but .* expects \[\?\]"),
        ({"z": np.zeros(2, np.float32)}, r"Unknown input tensor 'z'"),
        ({}, r"Missing input tensor 'x'"),
    ],
)  # fmt: skip
def test_wrong_inputs_are_invalid_arguments_naming_the_tensor(
    examples_model: Path, inputs: dict[str, np.ndarray], message: str
) -> None:
    """Wrong dtype, shape or name: INVALID_ARGUMENT naming the tensor, before TF runs."""
    _, servable = load(examples_model)
    with pytest.raises(InvalidArgumentError, match=message):
        call_signature(servable, "serving_default", inputs)


def test_error_raised_inside_tf_is_invalid_argument_with_tfs_message(dtypes_model: Path) -> None:
    """An op failing on the request's data gives INVALID_ARGUMENT with TF's message; calls go on."""
    _, servable = load(dtypes_model)
    with pytest.raises(InvalidArgumentError, match=r"^assertion failed: \[x must be > 0") as caught:
        call_signature(servable, "positive_only", {"x": np.array([1.0, -1.0], np.float32)})
    assert "{{node assert_positive" in caught.value.message  # where, as TF Serving reports it
    assert "__inference" not in caught.value.message  # but not TF's internal function names
    out = call_signature(servable, "positive_only", {"x": np.array([1.0], np.float32)})
    assert out["log"].tolist() == [0.0]


def test_string_input_holding_non_bytes_is_invalid_argument_naming_it(dtypes_model: Path) -> None:
    """An object array TF cannot convert is INVALID_ARGUMENT naming the input tensor."""
    _, servable = load(dtypes_model)
    with pytest.raises(InvalidArgumentError, match="Input tensor 'words' cannot be converted"):
        call_signature(servable, "strings", {"words": np.array([object()], dtype=object)})


def test_concurrent_calls_each_get_their_own_answer(examples_model: Path) -> None:
    """Calls from several threads at once all return the right values."""
    _, servable = load(examples_model)

    def predict(i: int) -> list[float]:
        x = np.full(3, i, np.float32)
        return call_signature(servable, None, {"x": x})["y"].tolist()  # type: ignore[no-any-return]

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(predict, range(200)))
    assert results == [[0.5 * i + 2] * 3 for i in range(200)]


def test_calls_after_unload_fail_cleanly(examples_model: Path) -> None:
    """A servable used after its loader unloaded it raises FAILED_PRECONDITION, not a crash."""
    loader, servable = load(examples_model)
    loader.unload()
    with pytest.raises(FailedPreconditionError, match="unloaded"):
        call_signature(servable, None, {"x": np.zeros(1, np.float32)})
    with pytest.raises(FailedPreconditionError, match="unloaded"):
        _ = servable.model
