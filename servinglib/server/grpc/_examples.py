"""TF Serving's ``Input`` (ExampleList / ExampleListWithContext) as serialized tf.Examples."""

from __future__ import annotations

from typing import Any

import numpy.typing as npt

from servinglib.codecs.example import serialize_input
from servinglib.errors import InvalidArgumentError
from servinglib.protos import classification_pb2, regression_pb2


def serialized_examples(request: Any, has_input: bool) -> npt.NDArray[Any]:  # noqa: ANN401 - any request with an ``input``
    """The examples of ``request.input`` as an object array of bytes, shape [n].

    As TF Serving serializes them (:func:`serialize_input`). Raises
    InvalidArgumentError when the input is missing or holds no kind.
    """
    if not has_input:
        raise InvalidArgumentError("Missing Input in the request")
    return serialize_input(request.input)


def classification_result(
    classifications: list[list[tuple[bytes | None, float | None]]],
    result: classification_pb2.ClassificationResult,
) -> None:
    """Fills ``result`` from per-example (label, score) pairs; missing ones stay unset."""
    for pairs in classifications:
        entry = result.classifications.add()
        for label, score in pairs:
            item = entry.classes.add()
            if label is not None:
                item.label = label.decode("utf-8", errors="replace")
            if score is not None:
                item.score = score


def regression_result(values: list[float], result: regression_pb2.RegressionResult) -> None:
    """Fills ``result`` with one Regression per value."""
    for value in values:
        result.regressions.add().value = value
