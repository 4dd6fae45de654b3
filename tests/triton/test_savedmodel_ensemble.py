"""An ensemble of a Python pre-processor, a SavedModel and a Python post-processor, served by
servinglib over REST and gRPC.

servinglib only: the ``nvidia-pytriton`` wheel's Triton 2.51 ships the Python backend alone (no
TensorFlow backend), so Triton cannot serve this repository; the test below says so when run.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from servinglib.server import ModelServerConfig
from servinglib.server.triton_repository import TritonRepository
from tests.triton.clients import PROTOCOLS, Clients
from tests.triton.oracle import skip_without_triton
from tests.triton.pipeline_models import chain_config, unary, write
from tests.triton.servinglib_serving import serving_repository

pytest.importorskip("tensorflow")

SAVEDMODEL_CONFIG = """
platform: "tensorflow_savedmodel"
max_batch_size: 0
input [ { name: "x" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""

ENSEMBLE_CONFIG = chain_config(
    ("pre", -1, "IN", "OUT"), ("half_plus_two", -1, "x", "y"), ("post", -1, "IN", "OUT")
)


def write_savedmodel_pipeline(repository: Path) -> Path:
    """pre (x+1) → half_plus_two (a SavedModel in ``1/model.savedmodel``: 0.5·x + 2) → post
    (x-3), as the ensemble ``tf_pipeline``."""
    from tests.loaders.tensorflow.saved_model_builders import save_examples_model

    unary(repository, "pre", "x + 1")
    unary(repository, "post", "x - 3")
    model = write(repository, "half_plus_two", SAVEDMODEL_CONFIG)
    save_examples_model(model / "1" / "model.savedmodel")
    write(repository, "tf_pipeline", ENSEMBLE_CONFIG)
    return repository


@pytest.fixture(scope="module")
def clients(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clients]:
    """Clients of servinglib serving the SavedModel pipeline."""
    repository = write_savedmodel_pipeline(tmp_path_factory.mktemp("repository"))
    config = ModelServerConfig(TritonRepository(repository).scan().models)
    with (
        serving_repository(repository, config=config) as serving,
        Clients(serving.http_url, serving.grpc_url) as both,
    ):
        yield both


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_savedmodel_step_between_python_steps(clients: Clients, protocol: str) -> None:
    """[1, 2] → pre [2, 3] → SavedModel [3, 3.5] → post [0, 0.5], over REST and gRPC."""
    answer = clients.infer(protocol, "tf_pipeline", {"INPUT": np.array([1.0, 2.0], np.float32)})
    assert answer == {"outputs": {"OUTPUT": [0.0, 0.5]}}


def test_the_savedmodel_step_is_counted_as_its_model(clients: Clients) -> None:
    """An ensemble request is one success of the SavedModel step's model."""
    before = _successes(clients)
    clients.infer("http", "tf_pipeline", {"INPUT": np.array([4.0], np.float32)})
    assert _successes(clients) == before + 1


def test_triton_cannot_serve_it() -> None:
    """The oracle's Triton has no TensorFlow backend: this repository is tested against
    servinglib only (skips where Triton is not installed)."""
    install = skip_without_triton()
    backends = sorted(path.name for path in install.python_backend.parent.iterdir())
    assert backends == ["python"]


def _successes(clients: Clients) -> int:
    (stats,) = clients.http.get_inference_statistics("half_plus_two", "1")["model_stats"]
    return int(stats["inference_stats"]["success"]["count"])
