"""Real SavedModels for the TensorFlow platform's tests: tf.Module models and Keras models.

Imported by the tests beside it (pytest puts this directory on sys.path).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

from servinglib.loaders.tensorflow import (
    SavedModelLoader,
    TensorFlowPlatformConfig,
    TensorFlowServable,
)

CLASSIFY = "tensorflow/serving/classify"
REGRESS = "tensorflow/serving/regress"
CLASSES = [b"low", b"high"]


def set_method_names(path: Path, method_names: dict[str, str]) -> None:
    """Rewrites method names in ``saved_model.pb`` (tf.saved_model.save writes only predict)."""
    pb = path / "saved_model.pb"
    saved_model = saved_model_pb2.SavedModel()
    saved_model.ParseFromString(pb.read_bytes())
    for meta_graph in saved_model.meta_graphs:
        for name, method_name in method_names.items():
            meta_graph.signature_def[name].method_name = method_name
    pb.write_bytes(saved_model.SerializeToString())


def serialized_examples(**features: list[float]) -> np.ndarray:
    """One serialized tf.Example per position of the value lists, as an object array of bytes."""
    count = len(next(iter(features.values())))
    examples = []
    for i in range(count):
        example = tf.train.Example()
        for name, values in features.items():
            example.features.feature[name].float_list.value.append(values[i])
        examples.append(example.SerializeToString())
    return np.array(examples, dtype=object)


def _x(serialized: tf.Tensor) -> tf.Tensor:
    return tf.io.parse_example(serialized, {"x": tf.io.FixedLenFeature([1], tf.float32)})["x"]


class Examples(tf.Module):
    """Predict, classify and regress signatures over y = 0.5·x + 2."""

    def __init__(self) -> None:
        super().__init__()
        self.a = tf.Variable(0.5)
        self.b = tf.Variable(2.0)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
    def predict(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"y": self.a * x + self.b}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def classify(self, inputs: tf.Tensor) -> dict[str, tf.Tensor]:
        high = tf.sigmoid(self.a * _x(inputs) + self.b)
        batch = tf.shape(high)[0]
        return {
            "scores": tf.concat([1.0 - high, high], axis=1),
            "classes": tf.tile(tf.constant([CLASSES]), [batch, 1]),
        }

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
    def regress(self, inputs: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"outputs": self.a * _x(inputs) + self.b}


class DTypes(tf.Module):
    """One signature per dtype family and shape kind; one that fails inside TF."""

    @tf.function(
        input_signature=[
            tf.TensorSpec([None], tf.float32, name="f32"),
            tf.TensorSpec([None], tf.float64, name="f64"),
        ]
    )
    def floats(self, f32: tf.Tensor, f64: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"f32_doubled": f32 * 2, "f64_halved": f64 / 2}

    @tf.function(
        input_signature=[
            tf.TensorSpec([None], tf.int32, name="i32"),
            tf.TensorSpec([None], tf.int64, name="i64"),
        ]
    )
    def ints(self, i32: tf.Tensor, i64: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"i32_plus_one": i32 + 1, "i64_squared": i64 * i64}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.bool, name="flags")])
    def bools(self, flags: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"negated": tf.logical_not(flags), "any": tf.reduce_any(flags)}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="words")])
    def strings(self, words: tf.Tensor) -> dict[str, tf.Tensor]:
        return {
            "shouted": tf.strings.join([tf.strings.upper(words), "!"]),
            "lengths": tf.strings.length(words),
            "first": words[0],
        }

    @tf.function(
        input_signature=[
            tf.TensorSpec(None, tf.float32, name="anything"),
            tf.TensorSpec([None, 3], tf.float32, name="rows"),
            tf.TensorSpec([], tf.int64, name="scalar"),
        ]
    )
    def shapes(self, anything: tf.Tensor, rows: tf.Tensor, scalar: tf.Tensor) -> dict[str, Any]:
        return {
            "anything": tf.identity(anything),
            "row_sums": tf.reduce_sum(rows, axis=1),
            "scalar": scalar + 1,
        }

    @tf.function(
        input_signature=[
            tf.TensorSpec([None], tf.float32, name="zeta"),
            tf.TensorSpec([None], tf.float32, name="alpha"),
        ]
    )
    def difference(self, zeta: tf.Tensor, alpha: tf.Tensor) -> dict[str, tf.Tensor]:
        return {"zeta_minus_alpha": zeta - alpha}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
    def positive_only(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
        with tf.control_dependencies([tf.debugging.assert_positive(x, message="x must be > 0")]):
            return {"log": tf.math.log(x)}


def save_examples_model(path: Path) -> Path:
    """The predict / classify / regress model, method names rewritten like TF Serving's."""
    module = Examples()
    tf.saved_model.save(
        module,
        str(path),
        signatures={
            "serving_default": module.predict,
            "classify_x": module.classify,
            "regress_x": module.regress,
        },
    )
    set_method_names(path, {"classify_x": CLASSIFY, "regress_x": REGRESS})
    return path


def save_dtypes_model(path: Path) -> Path:
    """The dtype-family model; ``floats`` is also its serving_default."""
    module = DTypes()
    functions = [
        module.floats,
        module.ints,
        module.bools,
        module.strings,
        module.shapes,
        module.difference,
        module.positive_only,
    ]
    signatures = {f.__name__: f for f in functions}
    signatures["serving_default"] = module.floats
    tf.saved_model.save(module, str(path), signatures=signatures)
    return path


def save_tf1_model(path: Path) -> Path:
    """A TF 1 SavedModel (SavedModelBuilder, graph and session) like TF Serving's own test models.

    serving_default: ``zeta``, ``alpha`` float [-1] → ``difference`` = zeta - alpha + b;
    regress_x_to_y (regress): serialized tf.Examples → ``outputs`` = 0.5·x + b; b = 2;
    sparse_sum: a sparse input, which numpy tensors cannot carry.
    """
    v1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default(), v1.Session(graph=graph) as session:
        a = v1.Variable(0.5, name="a")
        b = v1.Variable(2.0, name="b")
        zeta = v1.placeholder(tf.float32, [None], name="zeta")
        alpha = v1.placeholder(tf.float32, [None], name="alpha")
        difference = tf.identity(zeta - alpha + b, name="difference")
        examples = v1.placeholder(tf.string, [None], name="tf_example")
        y = a * _x(examples) + b
        sparse = v1.sparse_placeholder(tf.float32, name="sparse")
        total = tf.sparse.reduce_sum(sparse)
        session.run(v1.global_variables_initializer())
        info = v1.saved_model.utils.build_tensor_info
        predict = v1.saved_model.signature_def_utils.build_signature_def(
            {"zeta": info(zeta), "alpha": info(alpha)},
            {"difference": info(difference)},
            "tensorflow/serving/predict",
        )
        regress = v1.saved_model.signature_def_utils.regression_signature_def(examples, y)
        sparse_sum = v1.saved_model.signature_def_utils.build_signature_def(
            {"sparse": info(sparse)}, {"total": info(total)}, "tensorflow/serving/predict"
        )
        builder = v1.saved_model.builder.SavedModelBuilder(str(path))
        builder.add_meta_graph_and_variables(
            session,
            ["serve"],
            signature_def_map={
                "serving_default": predict,
                "regress_x_to_y": regress,
                "sparse_sum": sparse_sum,
            },
        )
        builder.save()
    return path


def keras_mlp(inputs: int = 8, hidden: int = 16, outputs: int = 4) -> keras.Model:
    """A small MLP with a named input ("features"), deterministic weights."""
    keras.utils.set_random_seed(7)
    features = keras.Input((inputs,), name="features")
    hidden_out = keras.layers.Dense(hidden, activation="relu")(features)
    return keras.Model(features, keras.layers.Dense(outputs)(hidden_out))


def load(
    path: Path | str, config: TensorFlowPlatformConfig | None = None
) -> tuple[SavedModelLoader, TensorFlowServable]:
    """A loaded SavedModelLoader and its servable."""
    loader = SavedModelLoader(str(path), config)
    loader.load()
    servable = loader.servable()
    assert isinstance(servable, TensorFlowServable)
    return loader, servable
