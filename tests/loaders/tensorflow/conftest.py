"""SavedModels written once per test session (saving takes 0.1-0.4 s each)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import saved_model_builders as builders
import tensorflow as tf


@pytest.fixture(scope="session")
def examples_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Predict (serving_default), classify (classify_x) and regress (regress_x) signatures."""
    return builders.save_examples_model(tmp_path_factory.mktemp("examples") / "1")


@pytest.fixture(scope="session")
def dtypes_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The dtype-family model (see saved_model_builders.DTypes); floats is serving_default."""
    return builders.save_dtypes_model(tmp_path_factory.mktemp("dtypes") / "1")


@pytest.fixture(scope="session")
def tf1_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A TF 1 SavedModel: serving_default (zeta, alpha → difference) and regress_x_to_y."""
    return builders.save_tf1_model(tmp_path_factory.mktemp("tf1") / "1")


@pytest.fixture(scope="session")
def keras_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path | np.ndarray]:
    """One MLP exported both ways, with a batch of inputs and Keras's own outputs for them."""
    model = builders.keras_mlp()
    base = tmp_path_factory.mktemp("keras")
    model.export(str(base / "export"), verbose=False)
    tf.saved_model.save(model, str(base / "saved_model"))
    batch = np.random.default_rng(3).normal(size=(5, 8)).astype(np.float32)
    return {
        "export": base / "export",
        "saved_model": base / "saved_model",
        "batch": batch,
        "expected": np.asarray(model(batch)),
    }
