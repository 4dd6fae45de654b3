"""The example models shipped in servinglib/examples give their documented answers."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from saved_model_builders import CLASSIFY, REGRESS, load, serialized_examples
from tensorflow_serving.apis import prediction_log_pb2

from servinglib.examples import HALF_PLUS_TWO, MODELS_DIR, PYTHON_HALF_PLUS_TWO
from servinglib.loaders.python import PythonLoader
from servinglib.loaders.warmup import WARMUP_FILE
from servinglib.servable import PREDICT_METHOD, call_signature

X = [1.0, 2.0, 5.0]
# Version → b in y = 0.5·x + b (scripts/make_example_models.py); c = 3 in every version.
B = {1: 2.0, 2: 3.0}


@pytest.mark.parametrize("version", [1, 2])
def test_half_plus_two_predicts_its_documented_outputs(version: int) -> None:
    """Version 1 computes 0.5·x + 2 and version 2 computes 0.5·x + 3."""
    _, servable = load(Path(HALF_PLUS_TWO) / str(version))
    out = call_signature(servable, None, {"x": np.array(X, np.float32)})
    assert out["y"].tolist() == [0.5 * x + B[version] for x in X]


@pytest.mark.parametrize("version", [1, 2])
def test_half_plus_two_classifies_and_regresses_tf_examples(version: int) -> None:
    """classify_x_to_y, regress_x_to_y and regress_x_to_y2 work on serialized tf.Examples."""
    _, servable = load(Path(HALF_PLUS_TWO) / str(version))
    methods = {name: spec.method_name for name, spec in servable.signatures.items()}
    assert methods == {
        "serving_default": PREDICT_METHOD,
        "classify_x_to_y": CLASSIFY,
        "regress_x_to_y": REGRESS,
        "regress_x_to_y2": REGRESS,
    }
    examples = {"inputs": serialized_examples(x=X)}
    y = [[0.5 * x + B[version]] for x in X]
    assert call_signature(servable, "classify_x_to_y", examples)["scores"].tolist() == y
    assert call_signature(servable, "regress_x_to_y", examples)["outputs"].tolist() == y
    y2 = [[0.5 * x + 3.0] for x in X]
    assert call_signature(servable, "regress_x_to_y2", examples)["outputs"].tolist() == y2


def test_version_2_replays_its_warmup_request_on_load() -> None:
    """Version 2's warmup file (one predict request) is replayed by load; version 1 has none."""
    loader_2, _ = load(Path(HALF_PLUS_TWO) / "2")
    assert loader_2.warmup_records == 1
    loader_1, _ = load(Path(HALF_PLUS_TWO) / "1")
    assert loader_1.warmup_records == 0


def test_warmup_file_is_tf_servings_format() -> None:
    """TF's own TFRecord reader reads the warmup file, and TF Serving's PredictionLog parses it."""
    path = Path(HALF_PLUS_TWO) / "2" / WARMUP_FILE
    records = [r.numpy() for r in tf.data.TFRecordDataset(str(path))]
    assert len(records) == 1
    log = prediction_log_pb2.PredictionLog.FromString(records[0])
    request = log.predict_log.request
    assert request.model_spec.signature_name == "serving_default"
    assert tf.make_ndarray(request.inputs["x"]).tolist() == X


def test_python_half_plus_two_matches_version_1() -> None:
    """The Python servable example computes what the SavedModel's version 1 does."""
    loader = PythonLoader(str(Path(PYTHON_HALF_PLUS_TWO) / "1"))
    loader.load()
    out = call_signature(loader.servable(), None, {"x": np.array(X, np.float32)})
    assert out["y"].dtype == np.float32
    assert out["y"].tolist() == [0.5 * x + 2.0 for x in X]
    loader.unload()


def test_shipped_models_stay_small() -> None:
    """Each shipped version is a few tens of kB (they are committed and go into the wheel)."""
    for root, dirs, _files in os.walk(MODELS_DIR):
        for version in (d for d in dirs if d.isdigit()):
            path = Path(root) / version
            size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
            assert size < 64 * 1024, f"{path} is {size} bytes"
