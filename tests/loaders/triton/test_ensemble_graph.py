"""An ensemble's load checks its steps against their models' configs: one line per fault."""

from __future__ import annotations

from pathlib import Path

import pytest

from servinglib.errors import InvalidArgumentError
from servinglib.loaders.triton.ensemble import EnsembleLoader, EnsembleServable
from tests.triton.pipeline_models import unary, write

HEAD = """
platform: "ensemble"
max_batch_size: 0
input [ {{ name: "INPUT" data_type: {input_type} dims: {input_dims} }} ]
output [ {{ name: "OUTPUT" data_type: TYPE_FP32 dims: [ -1 ] }} ]
ensemble_scheduling {{ step [ {steps} ] }}
"""


def step(model: str, reads: str, writes: str, model_input: str = "IN") -> str:
    """One step of ``model`` mapping its input from ``reads`` and its OUT to ``writes``."""
    return (
        f'{{ model_name: "{model}" model_version: -1 '
        f'input_map {{ key: "{model_input}" value: "{reads}" }} '
        f'output_map {{ key: "OUT" value: "{writes}" }} }}'
    )


def load(repository: Path, *steps: str, input_type: str = "TYPE_FP32", dims: str = "[ -1 ]"):
    """Loads the ensemble ``ens`` of ``steps`` in ``repository`` (with pre and double)."""
    unary(repository, "pre", "x + 1")
    unary(repository, "double", "x * 2")
    config = HEAD.format(input_type=input_type, input_dims=dims, steps=", ".join(steps))
    loader = EnsembleLoader(str(write(repository, "ens", config) / "1"))
    loader.load()
    return loader.servable()


def test_a_chain_loads_in_the_order_its_tensors_are_made(tmp_path: Path) -> None:
    """Steps listed last-first are ordered so each tensor is made before it is read."""
    servable = load(tmp_path, step("double", "mid", "OUTPUT"), step("pre", "INPUT", "mid"))
    assert isinstance(servable, EnsembleServable)
    assert [s.model_name for s in servable.graph.steps] == ["pre", "double"]


@pytest.mark.parametrize(
    ("steps", "options", "fault"),
    [
        (
            [step("ghost", "INPUT", "OUTPUT")],
            {},
            "step 0 (model ghost) names a model that is not in the repository",
        ),
        (
            [step("pre", "nowhere", "OUTPUT")],
            {},
            "step 0 (model pre) reads tensor nowhere, which no step and no input makes",
        ),
        (
            [step("pre", "INPUT", "OUTPUT")],
            {"input_type": "TYPE_INT32"},
            "tensor INPUT is int32 from its input but step 0 (model pre) takes float32",
        ),
        (
            [step("pre", "INPUT", "OUTPUT")],
            {"dims": "[ 2, 2 ]"},
            "tensor INPUT has shape [2, 2] from its input but step 0 (model pre) takes [-1]",
        ),
        (
            [step("pre", "INPUT", "OUTPUT", model_input="X")],
            {},
            "step 0 (model pre) maps input X, which its model does not have",
        ),
        (
            [step("pre", "OUTPUT", "mid"), step("double", "mid", "OUTPUT")],
            {},
            "its steps form a cycle: step 0 (model pre) -> step 1 (model double) -> "
            "step 0 (model pre)",
        ),
        (
            [step("pre", "INPUT", "mid")],
            {},
            "output OUTPUT is made by no step",
        ),
        (
            [step("pre", "INPUT", "OUTPUT"), step("double", "INPUT", "OUTPUT")],
            {},
            "tensor OUTPUT is made twice: by step 0 (model pre) and step 1 (model double)",
        ),
    ],
)
def test_a_faulty_ensemble_fails_its_load_in_one_line(
    tmp_path: Path, steps: list[str], options: dict[str, str], fault: str
) -> None:
    """A missing model, an unknown tensor, a type or shape mismatch, a cycle: one line each."""
    with pytest.raises(InvalidArgumentError) as caught:
        load(tmp_path, *steps, **options)
    assert caught.value.message == f"Ensemble ens: {fault}"
