"""TF Serving's ``Input`` (ExampleList / ExampleListWithContext) as serialized tf.Examples."""

from __future__ import annotations

from typing import Any

import numpy.typing as npt

from servinglib.codecs.example import serialize_examples
from servinglib.errors import InvalidArgumentError
from servinglib.protos import classification_pb2, input_pb2, regression_pb2


def serialized_examples(request: Any, has_input: bool) -> npt.NDArray[Any]:  # noqa: ANN401 - any request with an ``input``
    """The examples of ``request.input`` as an object array of bytes, shape [n].

    With a context, each example is the context merged with the example (its
    features win), as TF Serving merges them (:func:`serialize_examples`).
    Raises InvalidArgumentError when the input is missing or holds no kind.
    """
    if not has_input:
        raise InvalidArgumentError("Missing Input in the request")
    given: input_pb2.Input = request.input
    kind = given.WhichOneof("kind")
    if kind == "example_list":
        return serialize_examples(given.example_list.examples)
    if kind == "example_list_with_context":
        with_context = given.example_list_with_context
        return serialize_examples(with_context.examples, with_context.context)
    raise InvalidArgumentError("Input is empty: set example_list or example_list_with_context")


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
