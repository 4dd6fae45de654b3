"""The start-up "Try:" line: built from the default signature, and the request really succeeds."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from servinglib import (
    ModelConfig,
    ModelServerConfig,
    ModelSpec,
    PythonPlatformConfig,
    ServerCore,
    ServerCoreOptions,
    SignatureSpec,
    TensorSpec,
)
from servinglib.server.cli.example_request import example_request, try_command
from servinglib.testing import write_python_model

ALLOW_PYTHON = ServerCoreOptions(
    platform_configs={"python": PythonPlatformConfig(allow_code_execution=True)}
)

# A Python model whose one signature takes the inputs given and returns the first of them.
MODEL_PY = """
from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec

INPUTS = {inputs}

class Model(PythonModel):
    @signature(name={signature!r}, inputs=INPUTS, outputs=[TensorSpec("y", INPUTS[0].dtype,
               INPUTS[0].shape)])
    def predict(self, **inputs):
        return {{"y": inputs[INPUTS[0].name]}}
"""

# name → (signature name, inputs as TensorSpec source) of each model served below.
MODELS = {
    "scalars": ("serving_default", '[TensorSpec("x", "float32", [-1])]'),
    "rows_of_3": ("serving_default", '[TensorSpec("x", "float32", [-1, 3])]'),
    "mixed": (
        "serving_default",
        '[TensorSpec("a", "int64", [-1, 2]), TensorSpec("b", "bool", [-1]),'
        ' TensorSpec("c", "float64", [-1, -1, 2])]',
    ),
    "fixed": ("serving_default", '[TensorSpec("x", "int32", [2, 3])]'),
    "scalar": ("serving_default", '[TensorSpec("x", "float32", [])]'),
    "any_rank": ("serving_default", '[TensorSpec("x", "float32", None)]'),
    "only_other": ("predict", '[TensorSpec("x", "uint8", [-1, 2])]'),
}


def write_model(root: Path, name: str, signature: str, inputs: str) -> Path:
    return write_python_model(root, name, MODEL_PY.format(inputs=inputs, signature=signature))


def spec(*inputs: TensorSpec) -> dict[str, SignatureSpec]:
    return {"serving_default": SignatureSpec(inputs, [TensorSpec("y", "float32", [-1])])}


@pytest.mark.parametrize(
    ("inputs", "body"),
    [
        ([TensorSpec("x", "float32", [-1])], {"instances": [1.0, 2.0, 3.0]}),
        ([TensorSpec("x", "float32", [-1, 3])], {"instances": [[1.0, 2.0, 3.0]]}),
        (
            [TensorSpec("a", "int64", [-1, 2]), TensorSpec("b", "bool", [-1])],
            {"instances": [{"a": [1, 2], "b": True}]},
        ),
        ([TensorSpec("x", "int32", [2, 3])], {"inputs": [[1, 2, 3], [4, 5, 6]]}),
        ([TensorSpec("x", "float32", [])], {"inputs": 1.0}),
        ([TensorSpec("x", "float32", None)], {"instances": [1.0, 2.0, 3.0]}),
    ],
)
def test_the_body_follows_the_signature(inputs: list[TensorSpec], body: dict[str, Any]) -> None:
    """Names, dtypes and shapes make the body: rows with a batch dimension, else columns."""
    assert example_request(spec(*inputs)) == body


@pytest.mark.parametrize(
    "signatures",
    [
        spec(TensorSpec("text", np.object_, [-1])),
        spec(TensorSpec("image", "uint8", [-1, 224, 224, 3])),
        {
            "a": SignatureSpec([TensorSpec("x", "float32", [-1])], []),
            "b": SignatureSpec([TensorSpec("x", "float32", [-1])], []),
        },
    ],
    ids=["string input", "too large", "no default signature"],
)
def test_no_example_when_none_can_be_guessed(signatures: dict[str, SignatureSpec]) -> None:
    """String inputs, examples too large to copy, and no default signature give no example."""
    assert example_request(signatures) is None


def test_a_sole_signature_is_named_in_the_body() -> None:
    """A model whose only signature is not serving_default gets it named in the body."""
    signatures = {"predict": SignatureSpec([TensorSpec("x", "float32", [-1, 2])], [])}
    assert example_request(signatures) == {
        "signature_name": "predict",
        "instances": [[1.0, 2.0]],
    }


def python_core(root: Path, models: dict[str, tuple[str, str]]) -> ServerCore:
    """A ServerCore serving each of ``models`` (name → signature name, inputs) as python."""
    config = ModelServerConfig(
        ModelConfig.python(name, write_model(root, name, *spec)) for name, spec in models.items()
    )
    return ServerCore(config, ALLOW_PYTHON)


def test_the_example_of_each_model_is_answered_200(tmp_path: Path) -> None:
    """Each model's example body, posted to its :predict, is answered 200 by a real server."""
    from servinglib.server.rest import RestServer, create_app

    with python_core(tmp_path, MODELS) as core:
        app = create_app(core)
        server = RestServer(app, "127.0.0.1", 0)
        server.start()
        try:
            answers = {}
            for name in MODELS:
                body = example_request(core.model_metadata(ModelSpec.latest(name)).signatures)
                assert body is not None, name
                response = httpx.post(
                    f"{server.url}/v1/models/{name}:predict", json=body, timeout=30
                )
                answers[name] = (response.status_code, response.text)
        finally:
            server.stop()
            app.close()
    assert {name: answer for name, answer in answers.items() if answer[0] != 200} == {}


def test_the_command_is_a_curl_line_for_the_first_model_with_an_example(tmp_path: Path) -> None:
    """try_command skips a model no example fits and names the next, on localhost."""
    models = {
        "a_text": ("serving_default", '[TensorSpec("s", object, [-1])]'),
        "b_rows": MODELS["rows_of_3"],
    }
    with python_core(tmp_path, models) as core:
        command = try_command(core, "0.0.0.0", 8501)
    assert command is not None
    assert shlex.split(command) == [
        "curl",
        "-d",
        '{"instances": [[1.0, 2.0, 3.0]]}',
        "http://localhost:8501/v1/models/b_rows:predict",
    ]
