"""classify / regress: TF Serving's signature checks and per-example results on half_plus_two."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import numpy as np
import pytest

from servinglib import LoadRetryOptions, ManagerOptions
from servinglib.codecs import make_example
from servinglib.errors import FailedPreconditionError, InvalidArgumentError
from servinglib.examples import HALF_PLUS_TWO
from servinglib.server.config import ModelConfig, ModelServerConfig
from servinglib.server.model_spec import ModelSpec
from servinglib.server.plane.classify_regress import classify, regress
from servinglib.server.plane.data_plane import DataPlane
from servinglib.server.server_core import ServerCore
from servinglib.server.server_core_options import ServerCoreOptions

SPEC = ModelSpec.latest("half_plus_two")  # version 2: y = 0.5·x + 3


@pytest.fixture(scope="module")
def plane() -> Iterator[DataPlane]:
    config = ModelServerConfig([ModelConfig.tensorflow("half_plus_two", HALF_PLUS_TWO)])
    with ServerCore(
        config,
        ServerCoreOptions(
            manager=ManagerOptions(load_retry=LoadRetryOptions(max_num_load_retries=0))
        ),
    ) as core:
        plane = DataPlane(core, max_workers=2)
        yield plane
        plane.close()


def examples(*xs: float) -> np.ndarray:
    values = [make_example({"x": [x]}).SerializeToString() for x in xs]
    array = np.empty(len(values), dtype=object)
    array[:] = values
    return array


def test_classify_gives_scores_without_labels(plane: DataPlane) -> None:
    """A scores-only classify signature gives one (None, score) pair per example."""
    result = asyncio.run(classify(plane, SPEC, "classify_x_to_y", examples(1.0, 2.0)))
    assert result.classifications == [[(None, 3.5)], [(None, 4.0)]]
    assert (result.model_name, result.version, result.signature_name) == (
        "half_plus_two",
        2,
        "classify_x_to_y",
    )


def test_regress_gives_one_value_per_example(plane: DataPlane) -> None:
    """regress returns the signature's ``outputs`` flattened to one float per example."""
    result = asyncio.run(regress(plane, SPEC, "regress_x_to_y", examples(1.0, 4.0)))
    assert result.values == [3.5, 5.0]


def test_method_name_is_checked(plane: DataPlane) -> None:
    """A predict signature is rejected by classify and a classify one by regress."""
    with pytest.raises(InvalidArgumentError, match="method_name"):
        asyncio.run(classify(plane, SPEC, None, examples(1.0)))
    with pytest.raises(InvalidArgumentError, match="regression signature method_name"):
        asyncio.run(regress(plane, SPEC, "classify_x_to_y", examples(1.0)))


def test_unknown_signature_and_no_examples(plane: DataPlane) -> None:
    """An unknown signature is FAILED_PRECONDITION; an empty example list INVALID_ARGUMENT."""
    with pytest.raises(FailedPreconditionError, match="nope"):
        asyncio.run(regress(plane, SPEC, "nope", examples(1.0)))
    with pytest.raises(InvalidArgumentError, match="empty"):
        asyncio.run(regress(plane, SPEC, "regress_x_to_y", examples()))
