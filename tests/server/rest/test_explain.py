"""KServe V1's ``POST /v1/models/{m}:explain`` over a real REST server, with httpx."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from servinglib.examples import HALF_PLUS_TWO
from servinglib.server.config import ModelConfig, ModelServerConfig
from servinglib.server.rest import RestOptions, create_app
from servinglib.server.server_core import ServerCore
from tests.server.rest.conftest import CORE_OPTIONS, served_app

EXPLAINED_MODEL = textwrap.dedent(
    """
    import numpy as np

    from servinglib.loaders import PythonModel, signature
    from servinglib.servable import TensorSpec


    class Model(PythonModel):
        @signature(
            name="serving_default",
            inputs=[TensorSpec("x", np.float32, [-1, 2])],
            outputs=[TensorSpec("y", np.float32, [-1])],
        )
        def predict(self, x):
            return {"y": x @ np.array([2.0, -1.0], np.float32)}

        @signature(
            inputs=[TensorSpec("x", np.float32, [-1, 2])],
            outputs=[TensorSpec("attributions", np.float32, [-1, 2])],
        )
        def explain(self, x):
            return {"attributions": x * np.array([2.0, -1.0], np.float32)}
    """
)


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A REST server on 127.0.0.1 serving ``linear`` (with explain) and half_plus_two (without)."""
    base = tmp_path_factory.mktemp("explain") / "linear"
    (base / "1").mkdir(parents=True)
    Path(base / "1" / "model.py").write_text(EXPLAINED_MODEL)
    config = ModelServerConfig(
        [ModelConfig.python("linear", base), ModelConfig.tensorflow("hpt", HALF_PLUS_TWO)]
    )
    with (
        ServerCore(config, CORE_OPTIONS) as core,
        served_app(create_app(core, RestOptions())) as url,
    ):
        yield url


def test_explain_answers_explanations_in_rows(url: str) -> None:
    """``:explain`` runs the model's ``explain`` signature and answers ``explanations`` rows."""
    with httpx.Client(base_url=url, timeout=30.0) as client:
        response = client.post("/v1/models/linear:explain", json={"instances": [[1.0, 3.0]]})
        predicted = client.post("/v1/models/linear:predict", json={"instances": [[1.0, 3.0]]})
    assert response.status_code == 200, response.text
    assert response.json() == {"explanations": [[2.0, -3.0]]}
    assert predicted.json() == {"predictions": [-1.0]}


def test_explain_of_a_version_in_columns(url: str) -> None:
    """A versioned path works as for predict, and columnar inputs give columnar explanations."""
    with httpx.Client(base_url=url, timeout=30.0) as client:
        response = client.post(
            "/v1/models/linear/versions/1:explain", json={"inputs": {"x": [[1.0, 1.0]]}}
        )
    assert response.status_code == 200, response.text
    assert response.json() == {"explanations": [[2.0, -1.0]]}


def test_a_model_without_explain_is_501_as_in_kserve(url: str) -> None:
    """A model without an ``explain`` signature answers 501 naming it (KServe's NotImplemented)."""
    with httpx.Client(base_url=url, timeout=30.0) as client:
        response = client.post("/v1/models/hpt:explain", json={"instances": [1.0]})
    assert response.status_code == 501
    assert "hpt has no 'explain' signature" in response.json()["error"]


def test_explain_of_an_unknown_model_is_404(url: str) -> None:
    """``:explain`` of a model the server does not serve is 404, as ``:predict`` is."""
    with httpx.Client(base_url=url, timeout=30.0) as client:
        response = client.post("/v1/models/nope:explain", json={"instances": [1.0]})
    assert response.status_code == 404
