"""Signatures read from saved_model.pb: method names, dtypes, shapes, tensor names."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
from saved_model_builders import CLASSIFY, REGRESS, load

from servinglib.servable import PREDICT_METHOD, ExecutionMode


def test_method_names_come_from_the_saved_model_proto(examples_model: Path) -> None:
    """Rewritten classify/regress method names are reported; the init op is no signature."""
    _, servable = load(examples_model)
    assert sorted(servable.signatures) == ["classify_x", "regress_x", "serving_default"]
    assert servable.signatures["serving_default"].method_name == PREDICT_METHOD
    assert servable.signatures["classify_x"].method_name == CLASSIFY
    assert servable.signatures["regress_x"].method_name == REGRESS
    assert all(s.execution_mode is ExecutionMode.THREAD for s in servable.signatures.values())


def test_tensor_specs_carry_dtype_shape_and_tensor_name(examples_model: Path) -> None:
    """Each input and output has the SignatureDef's key, numpy dtype, shape and TF tensor name."""
    _, servable = load(examples_model)
    predict = servable.signatures["serving_default"]
    (x,) = predict.inputs.values()
    assert (x.name, x.dtype, x.shape, x.tensor_name) == (
        "x",
        np.float32,
        (-1,),
        "serving_default_x:0",
    )
    assert predict.outputs["y"].dtype == np.float32
    assert predict.outputs["y"].tensor_name.endswith(":0")
    classify = servable.signatures["classify_x"]
    assert classify.inputs["inputs"].is_string
    assert classify.inputs["inputs"].shape == (-1,)
    assert classify.outputs["scores"].shape == (-1, 2)
    assert classify.outputs["classes"].is_string
    assert servable.signatures["regress_x"].outputs["outputs"].shape == (-1, 1)


def test_every_dtype_family_maps_to_its_numpy_dtype(dtypes_model: Path) -> None:
    """float32/64, int32/64, bool and string (object) tensors get the matching numpy dtypes."""
    _, servable = load(dtypes_model)
    sig = servable.signatures
    assert sig["floats"].inputs["f32"].dtype == np.float32
    assert sig["floats"].inputs["f64"].dtype == np.float64
    assert sig["ints"].inputs["i32"].dtype == np.int32
    assert sig["ints"].outputs["i64_squared"].dtype == np.int64
    assert sig["bools"].inputs["flags"].dtype == np.bool_
    assert sig["strings"].inputs["words"].dtype == np.dtype(object)
    assert sig["strings"].outputs["lengths"].dtype == np.int32


def test_unknown_rank_fixed_dims_and_scalars(dtypes_model: Path) -> None:
    """Unknown rank is None, unknown dims are -1, known dims keep their size, scalars are ()."""
    _, servable = load(dtypes_model)
    shapes = servable.signatures["shapes"]
    assert shapes.inputs["anything"].shape is None
    assert shapes.inputs["rows"].shape == (-1, 3)
    assert shapes.inputs["scalar"].shape == ()
    assert shapes.outputs["row_sums"].shape == (-1,)


def test_keras_export_signatures(keras_models: dict[str, Path | np.ndarray]) -> None:
    """model.export() gives serve and serving_default, keyed by the Input's name."""
    _, servable = load(keras_models["export"])
    assert sorted(servable.signatures) == ["serve", "serving_default"]
    for signature in servable.signatures.values():
        assert list(signature.inputs) == ["features"]
        assert signature.inputs["features"].shape == (-1, 8)
        assert list(signature.outputs) == ["output_0"]
        assert signature.method_name == PREDICT_METHOD


def test_keras_saved_model_signature(keras_models: dict[str, Path | np.ndarray]) -> None:
    """tf.saved_model.save(keras_model) gives serving_default alone, with input key ``inputs``."""
    _, servable = load(keras_models["saved_model"])
    assert list(servable.signatures) == ["serving_default"]
    assert list(servable.signatures["serving_default"].inputs) == ["inputs"]


def test_signature_with_a_sparse_tensor_is_skipped_with_a_warning(
    tf1_model: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A signature taking a sparse tensor is left out, with a warning; the others serve."""
    with caplog.at_level(logging.WARNING, "servinglib.loaders.tensorflow"):
        _, servable = load(tf1_model)
    assert sorted(servable.signatures) == ["regress_x_to_y", "serving_default"]
    assert "signature 'sparse_sum' cannot be served" in caplog.text
    assert "tensor 'sparse' is not dense" in caplog.text
