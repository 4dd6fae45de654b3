"""Triton ensembles served by servinglib, called with tritonclient over REST and gRPC."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from servinglib.server import ModelServerConfig
from servinglib.server.model_spec import ModelSpec
from servinglib.server.plane.data_plane import DataPlane
from servinglib.server.triton_repository import TritonRepository
from servinglib.testing import wait_until
from tests.triton.clients import PROTOCOLS, Clients
from tests.triton.pipeline_models import write_pipeline_repository
from tests.triton.servinglib_serving import Serving, serving_repository

X = np.array([1.0, 2.0], dtype=np.float32)


@pytest.fixture(scope="module", params=["sync", "aio"])
def served(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[tuple[Serving, Clients]]:
    """servinglib serving the pipeline repository (on each gRPC server), and its clients."""
    repository = write_pipeline_repository(
        tmp_path_factory.mktemp("repository"), tmp_path_factory.mktemp("rendezvous")
    )
    config = ModelServerConfig(TritonRepository(repository).scan().models)
    with (
        serving_repository(repository, request.param, config=config) as serving,
        Clients(serving.http_url, serving.grpc_url) as clients,
    ):
        yield serving, clients


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_chain_of_three_steps_answers(served: tuple[Serving, Clients], protocol: str) -> None:
    """pre (x+1) → double (x*2) → post (x-3): the ensemble's output is the chain's."""
    _, clients = served
    answer = clients.infer(protocol, "pipeline", {"INPUT": X})
    assert answer == {"outputs": {"OUTPUT": [1.0, 3.0]}}


@pytest.mark.parametrize(("protocol", "token"), [("http", 5.0), ("grpc", 6.0)])
def test_a_diamonds_branches_run_at_once(
    served: tuple[Serving, Clients], protocol: str, token: float
) -> None:
    """Each branch waits inside execute for the other: the diamond answers only if both
    branches ran at the same time (one after the other, each would give up and answer -1000)."""
    _, clients = served
    answer = clients.infer(protocol, "diamond", {"INPUT": np.array([token], np.float32)})
    assert answer == {"outputs": {"OUTPUT": [token * 110]}}


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_failing_step_fails_the_request_naming_it(
    served: tuple[Serving, Clients], protocol: str
) -> None:
    """A step's error is the request's, with its code, naming the step and its model."""
    _, clients = served
    answer = clients.infer(protocol, "pipeline", {"INPUT": np.array([-5.0], np.float32)})
    assert answer["error"] in {"400", "StatusCode.INVALID_ARGUMENT"}
    assert "Ensemble pipeline: step 0 (model pre) failed: negative input" in answer["message"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_ensembles_metadata_is_its_configs(
    served: tuple[Serving, Clients], protocol: str
) -> None:
    """V2 metadata of an ensemble: its own inputs and outputs, and platform ensemble."""
    _, clients = served
    assert clients.metadata(protocol, "pipeline") == {
        "name": "pipeline",
        "versions": ["1"],
        "inputs": [{"name": "INPUT", "datatype": "FP32", "shape": [-1]}],
        "outputs": [{"name": "OUTPUT", "datatype": "FP32", "shape": [-1]}],
    }
    assert clients.http.get_model_config("pipeline")["platform"] == "ensemble"


def test_statistics_count_the_ensemble_and_each_step(served: tuple[Serving, Clients]) -> None:
    """One ensemble request is one success of the ensemble and one of each step model."""
    _, clients = served
    before = _successes(clients)
    clients.infer("http", "pipeline", {"INPUT": X})
    after = _successes(clients)
    assert {name: after[name] - before[name] for name in after} == {
        "pipeline": 1,
        "pre": 1,
        "double": 1,
        "post": 1,
    }


def _successes(clients: Clients) -> dict[str, int]:
    counts = {}
    for name in ("pipeline", "pre", "double", "post"):
        (stats,) = clients.http.get_inference_statistics(name)["model_stats"]
        counts[name] = int(stats["inference_stats"]["success"]["count"])
    return counts


def test_an_ensemble_is_not_ready_while_a_step_model_is_not(tmp_path: Path) -> None:
    """With a step model unloaded the ensemble is not ready (naming the step), nor the server."""
    repository = write_pipeline_repository(tmp_path / "repo", tmp_path)
    models = TritonRepository(repository).scan().models
    with serving_repository(repository, config=ModelServerConfig(models)) as serving:
        core = serving.core
        assert core.ready()
        core.unload_model("double")
        plane = DataPlane(core)
        try:
            # (unload_model asks for the unload; the manager applies it on its own thread)
            wait_until(lambda: not plane.questions.model_ready(ModelSpec.latest("double")).ready)
            readiness = plane.questions.model_ready(ModelSpec.latest("pipeline"))
        finally:
            plane.close()
        assert not readiness.ready
        assert readiness.error is not None
        assert "double" in readiness.error.message
        assert not core.ready()
