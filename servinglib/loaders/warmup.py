"""Warmup: replay recorded requests against a freshly loaded servable, before it serves."""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any, final

import attrs

from servinglib.errors import DataLossError, InvalidArgumentError, ServingError
from servinglib.servable import Servable, call_signature, resolve_signature

if TYPE_CHECKING:
    from servinglib.protos import input_pb2, predict_pb2

_log = logging.getLogger(__name__)

WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")
"""Where a version directory keeps its warmup requests (TF Serving's layout)."""
MAX_WARMUP_RECORDS = 1000
"""TF Serving's limit on the records of a warmup file."""


@final
@attrs.frozen
class WarmupOptions:
    """Whether and how often warmup requests are replayed.

    ``num_request_iterations``: times each record is replayed (TF Serving's
    ``ModelWarmupOptions.num_request_iterations``, default 1).
    Immutable, so thread-safe.
    """

    enabled: bool = True
    num_request_iterations: int = attrs.field(default=1, validator=attrs.validators.ge(1))


def run_warmup(servable: Servable, version_dir: str, options: WarmupOptions) -> int:
    """Replays ``version_dir``'s warmup file against ``servable``; returns the records replayed.

    A missing file is no warmup (0).  The file is a TFRecord of
    ``PredictionLog`` s (predict, classify, regress or multi-inference logs),
    read without TensorFlow.  Raises DataLossError for a corrupt file,
    InvalidArgumentError for more than 1000 records or an unsupported log,
    and a failing request's own error (message prefixed with the record)
    for a request the servable rejects: any of these fails the load.
    """
    path = os.path.join(version_dir, WARMUP_FILE)
    if not options.enabled or not os.path.isfile(path):
        return 0
    from servinglib.codecs.tfrecord import read_records
    from servinglib.protos import prediction_log_pb2

    records = list(read_records(path, max_records=MAX_WARMUP_RECORDS + 1))
    if len(records) > MAX_WARMUP_RECORDS:
        raise InvalidArgumentError(
            f"Number of warmup records in {path} exceeds the maximum ({MAX_WARMUP_RECORDS})"
        )
    for index, record in enumerate(records):
        log = prediction_log_pb2.PredictionLog()
        try:
            log.ParseFromString(record)
        except Exception as exc:
            raise DataLossError(f"Warmup record {index} of {path} is not a PredictionLog") from exc
        for _ in range(options.num_request_iterations):
            try:
                _replay(servable, log)
            except ServingError as error:
                raise type(error)(
                    f"Warmup record {index} of {path} failed: {error.message}"
                ) from error
    _log.info("replayed %d warmup records from %s", len(records), path)
    return len(records)


def _replay(servable: Servable, log: Any) -> None:  # noqa: ANN401 - a PredictionLog
    kind = log.WhichOneof("log_type")
    if kind == "predict_log":
        _predict(servable, log.predict_log.request)
    elif kind == "classify_log":
        request = log.classify_log.request
        _examples(servable, request.model_spec.signature_name, request.input)
    elif kind == "regress_log":
        request = log.regress_log.request
        _examples(servable, request.model_spec.signature_name, request.input)
    elif kind == "multi_inference_log":
        request = log.multi_inference_log.request
        for task in request.tasks:
            _examples(servable, task.model_spec.signature_name, request.input)
    else:
        raise InvalidArgumentError(f"Unsupported warmup log type: {kind}")


def _predict(servable: Servable, request: predict_pb2.PredictRequest) -> None:
    from servinglib.codecs.limits import DecodeLimits
    from servinglib.codecs.tensor import to_numpy

    # Warmup records ship with the model, so they fill tensors as TensorFlow would.
    limits = DecodeLimits.trusted()
    inputs = {name: to_numpy(proto, limits=limits) for name, proto in request.inputs.items()}
    call_signature(servable, request.model_spec.signature_name, inputs, request.output_filter)


def _examples(servable: Servable, signature_name: str, model_input: input_pb2.Input) -> None:
    """Calls a classify/regress signature with the serialized examples of ``model_input``."""
    from servinglib.codecs.example import serialize_input

    name, spec = resolve_signature(servable, signature_name)
    if len(spec.inputs) != 1:
        raise InvalidArgumentError(
            f"Signature '{name}' takes {len(spec.inputs)} inputs; classify and regress need one"
        )
    (input_name,) = spec.inputs
    call_signature(servable, name, {input_name: serialize_input(model_input)})
