"""PredictionLog records of served requests, as TF Serving's request logger writes them."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy.typing as npt

from servinglib.codecs.tensor import from_numpy
from servinglib.protos import (
    classification_pb2,
    input_pb2,
    logging_pb2,
    model_pb2,
    prediction_log_pb2,
    regression_pb2,
)


def predict_record(  # noqa: PLR0917 - called with the queued arguments, in order
    model_name: str,
    version: int,
    signature_name: str,
    inputs: Mapping[str, npt.ArrayLike],
    outputs: Mapping[str, npt.ArrayLike],
    output_filter: Iterable[str] | None,
    request_id: str = "",
    parameters: Mapping[str, bool | int | float | str] | None = None,
) -> bytes:
    """A serialized PredictionLog holding a ``predict_log`` (request and response), its
    metadata the request's id and the ``parameters`` its model was given."""
    log = prediction_log_pb2.PredictionLog()
    _fill_spec(log.log_metadata.model_spec, model_name, version, signature_name)
    log.log_metadata.request_id = request_id
    for name, value in (parameters or {}).items():
        _fill_parameter(log.log_metadata.request_parameters[name], value)
    request = log.predict_log.request
    _fill_spec(request.model_spec, model_name, version, signature_name)
    for name, array in inputs.items():
        request.inputs[name].CopyFrom(from_numpy(array))
    request.output_filter.extend(output_filter or ())
    response = log.predict_log.response
    _fill_spec(response.model_spec, model_name, version, signature_name)
    for name, array in outputs.items():
        response.outputs[name].CopyFrom(from_numpy(array))
    return log.SerializeToString()


def classify_record(
    model_name: str,
    version: int,
    signature_name: str,
    serialized_examples: Sequence[bytes],
    classifications: Sequence[Sequence[tuple[bytes | None, float | None]]],
) -> bytes:
    """A serialized PredictionLog holding a ``classify_log`` (request and response)."""
    log = prediction_log_pb2.PredictionLog()
    _fill_spec(log.log_metadata.model_spec, model_name, version, signature_name)
    request = log.classify_log.request
    _fill_spec(request.model_spec, model_name, version, signature_name)
    _fill_examples(request.input, serialized_examples)
    response = log.classify_log.response
    _fill_spec(response.model_spec, model_name, version, signature_name)
    for row in classifications:
        classes = response.result.classifications.add()
        for label, score in row:
            entry: classification_pb2.Class = classes.classes.add()
            if label is not None:
                entry.label = label.decode("utf-8", "replace")
            if score is not None:
                entry.score = score
    return log.SerializeToString()


def regress_record(
    model_name: str,
    version: int,
    signature_name: str,
    serialized_examples: Sequence[bytes],
    values: Sequence[float],
) -> bytes:
    """A serialized PredictionLog holding a ``regress_log`` (request and response)."""
    log = prediction_log_pb2.PredictionLog()
    _fill_spec(log.log_metadata.model_spec, model_name, version, signature_name)
    request = log.regress_log.request
    _fill_spec(request.model_spec, model_name, version, signature_name)
    _fill_examples(request.input, serialized_examples)
    response = log.regress_log.response
    _fill_spec(response.model_spec, model_name, version, signature_name)
    for value in values:
        regression: regression_pb2.Regression = response.result.regressions.add()
        regression.value = value
    return log.SerializeToString()


def multi_inference_record(request: Any, response: Any) -> bytes:  # noqa: ANN401 - messages
    """A serialized PredictionLog holding a ``multi_inference_log`` of the request's protos.

    ``request`` and ``response``: a ``MultiInferenceRequest`` and its
    ``MultiInferenceResponse`` (ours or wire-identical ones).
    """
    log = prediction_log_pb2.PredictionLog()
    log.multi_inference_log.request.ParseFromString(request.SerializeToString())
    log.multi_inference_log.response.ParseFromString(response.SerializeToString())
    if log.multi_inference_log.request.tasks:
        log.log_metadata.model_spec.CopyFrom(log.multi_inference_log.request.tasks[0].model_spec)
    return log.SerializeToString()


def _fill_spec(spec: model_pb2.ModelSpec, name: str, version: int, signature_name: str) -> None:
    spec.name = name
    spec.version.value = version
    spec.signature_name = signature_name


def _fill_parameter(parameter: logging_pb2.LoggedParameter, value: bool | float | str) -> None:
    if isinstance(value, bool):
        parameter.bool_value = value
    elif isinstance(value, int):
        parameter.int64_value = value
    elif isinstance(value, float):
        parameter.double_value = value
    else:
        parameter.string_value = value


def _fill_examples(model_input: input_pb2.Input, serialized_examples: Sequence[Any]) -> None:
    examples = model_input.example_list.examples
    for serialized in serialized_examples:
        examples.add().ParseFromString(bytes(serialized))
