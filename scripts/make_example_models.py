"""Regenerates the example SavedModels shipped in servinglib/examples/models.

    .venv/bin/python scripts/make_example_models.py [--output DIR]

Writes ``half_plus_two/1`` and ``half_plus_two/2``: TF Serving's
``half_plus_two`` test model rebuilt with ``tf.Module``, with variables
a = 0.5, c = 3 and b = 2 in version 1, b = 3 in version 2 (so the versions
answer differently).  Signatures:

- ``serving_default`` (predict): ``x`` float32 [-1] → ``y`` = a·x + b
- ``classify_x_to_y`` (classify): ``inputs`` serialized tf.Examples with a
  float feature ``x`` → ``scores`` float32 [-1, 1] = a·x + b
- ``regress_x_to_y`` (regress): ``inputs`` → ``outputs`` float32 [-1, 1] = a·x + b
- ``regress_x_to_y2`` (regress): ``inputs`` → ``outputs`` = a·x + c

``tf.saved_model.save`` writes every signature as a predict signature; the
classify and regress method names are written into ``saved_model.pb``
afterwards (and ``fingerprint.pb`` recomputed).  Version 2 also gets a
warmup file, ``assets.extra/tf_serving_warmup_requests``: one PredictionLog
with a predict request for ``serving_default``, written with TF's own
TFRecord writer and tensorflow-serving-api's protos.

The Python servable beside them, ``python_half_plus_two/1/model.py``, is
source code kept by hand; this script leaves it alone.
Needs the test dependencies (``./dev setup``): tensorflow and
tensorflow-serving-api.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow.python.saved_model import fingerprinting_utils
from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = ROOT / "servinglib" / "examples" / "models"

CLASSIFY = "tensorflow/serving/classify"
REGRESS = "tensorflow/serving/regress"
WARMUP_FILE = Path("assets.extra") / "tf_serving_warmup_requests"
WARMUP_X = [1.0, 2.0, 5.0]

# Version → b; a and c are the same in every version.
VERSIONS = {1: 2.0, 2: 3.0}
WARMUP_VERSIONS = {2}


class HalfPlusTwo(tf.Module):
    """y = a·x + b, y2 = a·x + c, from a float tensor or from serialized tf.Examples."""

    def __init__(self, b: float) -> None:
        super().__init__()
        self.a = tf.Variable(0.5, name="a")
        self.b = tf.Variable(b, name="b")
        self.c = tf.Variable(3.0, name="c")

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
    def predict(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"y": self.a * x + self.b}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def classify_x_to_y(self, inputs: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"scores": self.a * _x(inputs) + self.b}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def regress_x_to_y(self, inputs: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"outputs": self.a * _x(inputs) + self.b}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def regress_x_to_y2(self, inputs: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"outputs": self.a * _x(inputs) + self.c}


def _x(serialized: tf.Tensor) -> tf.Tensor:
    """Feature ``x`` (one float, required) of each serialized tf.Example: shape [batch, 1]."""
    features = tf.io.parse_example(serialized, {"x": tf.io.FixedLenFeature([1], tf.float32)})
    return features["x"]


def save_half_plus_two(path: Path, b: float) -> None:
    """Writes the half_plus_two SavedModel with ``b`` to ``path`` (which must not exist)."""
    model = HalfPlusTwo(b)
    signatures = {
        "serving_default": model.predict,
        "classify_x_to_y": model.classify_x_to_y,
        "regress_x_to_y": model.regress_x_to_y,
        "regress_x_to_y2": model.regress_x_to_y2,
    }
    tf.saved_model.save(model, str(path), signatures=signatures)
    set_method_names(
        path, {"classify_x_to_y": CLASSIFY, "regress_x_to_y": REGRESS, "regress_x_to_y2": REGRESS}
    )


def set_method_names(path: Path, method_names: dict[str, str]) -> None:
    """Rewrites the method names of signatures in ``path/saved_model.pb`` (and its fingerprint)."""
    pb = path / "saved_model.pb"
    saved_model = saved_model_pb2.SavedModel()
    saved_model.ParseFromString(pb.read_bytes())
    for meta_graph in saved_model.meta_graphs:
        for name, method_name in method_names.items():
            meta_graph.signature_def[name].method_name = method_name
    pb.write_bytes(saved_model.SerializeToString())
    fingerprinting_utils.write_fingerprint(str(path))


def write_warmup(path: Path) -> None:
    """Writes one predict request for ``serving_default`` as the version's warmup file."""
    request = predict_pb2.PredictRequest(
        model_spec=model_pb2.ModelSpec(name="half_plus_two", signature_name="serving_default")
    )
    request.inputs["x"].CopyFrom(tf.make_tensor_proto(WARMUP_X, dtype=tf.float32))
    log = prediction_log_pb2.PredictionLog(
        predict_log=prediction_log_pb2.PredictLog(request=request)
    )
    (path / WARMUP_FILE).parent.mkdir(parents=True, exist_ok=True)
    with tf.io.TFRecordWriter(str(path / WARMUP_FILE)) as writer:
        writer.write(log.SerializeToString())


def check(path: Path, b: float) -> None:
    """Loads the written model back and checks its answers, so a broken export is not shipped."""
    loaded = tf.saved_model.load(str(path))
    y = loaded.signatures["serving_default"](x=tf.constant(WARMUP_X))["y"].numpy()
    expected = [0.5 * x + b for x in WARMUP_X]
    if y.tolist() != expected:
        raise SystemExit(f"{path}: serving_default gave {y.tolist()}, expected {expected}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="models directory")
    args = parser.parse_args()
    base: Path = args.output / "half_plus_two"
    base.mkdir(parents=True, exist_ok=True)
    for version, b in VERSIONS.items():
        # Written aside, then moved into place: a watching server never sees half a version.
        with tempfile.TemporaryDirectory(dir=base) as scratch:
            staged = Path(scratch) / str(version)
            save_half_plus_two(staged, b)
            if version in WARMUP_VERSIONS:
                write_warmup(staged)
            # Git and the wheel keep no empty directories (TF writes an empty assets/): drop
            # them here, so the model is checked as it ships.
            for empty in sorted(staged.rglob("*"), reverse=True):
                if empty.is_dir() and not any(empty.iterdir()):
                    empty.rmdir()
            check(staged, b)
            target = base / str(version)
            shutil.rmtree(target, ignore_errors=True)
            staged.rename(target)
        size = sum(f.stat().st_size for f in target.rglob("*") if f.is_file())
        print(f"wrote {target} ({size / 1024:.1f} kB)")


if __name__ == "__main__":
    main()
