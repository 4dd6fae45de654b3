"""TF Serving's REST API: model status, metadata, predict, classify and regress."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, final

import numpy as np
import numpy.typing as npt

from servinglib.codecs import make_example, serialize_examples
from servinglib.errors import InvalidArgumentError, UnimplementedError, shortened
from servinglib.servable import SignatureSpec, find_signature
from servinglib.server.plane.classify_regress import classify, regress
from servinglib.server.plane.data_plane import DataPlane
from servinglib.server.plane.metadata import signature_def_map
from servinglib.server.rest import json_codec
from servinglib.server.rest.exchange import RestRequest, RestResponse
from servinglib.server.rest.tensor_json import (
    decode_b64,
    is_b64,
    json_type,
    numbers_to_json,
    strings_to_json,
    to_array,
)
from servinglib.server.status import ModelStatus

_MISSING = object()
EXPLAIN_SIGNATURE = "explain"
"""The signature ``:explain`` runs (KServe V1's explain verb)."""
_BYTES_SUFFIX = "_bytes"


@final
class TfServingApi:
    """The endpoints of TF Serving's REST API over one ServerCore and DataPlane.

    Each method is a handler (:data:`~servinglib.server.rest.exchange.Handler`).
    Thread-safe: holds no mutable state.
    """

    def __init__(self, plane: DataPlane) -> None:
        self._plane = plane

    async def list_models(self, _request: RestRequest) -> RestResponse:
        """``GET /v1/models``: every configured model with its versions' status (not in TFS)."""
        models = []
        for name in self._plane.questions.list_models():
            status = self._plane.questions.model_status(name)
            models.append({"name": name, **_status_json(status)})
        return RestResponse.json({"models": models})

    async def status(self, request: RestRequest) -> RestResponse:
        """``GET /v1/models/{m}[/versions/{v}|/labels/{l}]``: GetModelStatus as JSON."""
        status = self._plane.questions.model_status(request.model_spec())
        return RestResponse.json(_status_json(status))

    async def metadata(self, request: RestRequest) -> RestResponse:
        """``GET …/metadata``: the model spec and its SignatureDefMap as JSON."""
        from google.protobuf import json_format

        metadata = self._plane.questions.model_metadata(request.model_spec())
        signature_def = json_format.MessageToDict(
            signature_def_map(metadata.signatures),
            preserving_proto_field_name=True,
            always_print_fields_with_no_presence=True,
        )
        return RestResponse.json(
            {
                "model_spec": {
                    "name": metadata.name,
                    "signature_name": "",
                    "version": str(metadata.version),
                },
                "metadata": {"signature_def": signature_def},
            }
        )

    async def predict(self, request: RestRequest) -> RestResponse:
        """``POST …:predict``: row or columnar tensors in, predictions or outputs out."""
        body = request.json_object()
        row, outputs = await self._call(request, body, _signature_name(body))
        if row:
            return _json_response({"predictions": _row_predictions(outputs)})
        return _json_response({"outputs": _columnar_outputs(outputs)})

    async def explain(self, request: RestRequest) -> RestResponse:
        """``POST …:explain`` (KServe V1): the model's ``explain`` signature run as predict
        runs one, its outputs as ``{"explanations": ...}`` (rows or columns, as the request).

        A model without the signature is UNIMPLEMENTED (501), as KServe answers
        a model without an explainer.
        """
        body = request.json_object()
        row, outputs = await self._call(request, body, EXPLAIN_SIGNATURE)
        explanations = _row_predictions(outputs) if row else _columnar_outputs(outputs)
        return _json_response({"explanations": explanations})

    async def _call(
        self, request: RestRequest, body: dict[str, Any], signature_name: str | None
    ) -> tuple[bool, dict[str, npt.NDArray[Any]]]:
        """Runs ``signature_name`` on the body's ``instances`` (row format: True) or
        ``inputs`` (columnar: False); the format and the outputs."""
        instances = body.get("instances", _MISSING)
        inputs = body.get("inputs", _MISSING)
        if instances is not _MISSING and inputs is not _MISSING:
            raise InvalidArgumentError(
                "Not formatted correctly: expecting only one of 'inputs' or 'instances' keys"
            )
        if instances is _MISSING and inputs is _MISSING:
            raise InvalidArgumentError("Missing 'inputs' or 'instances' key")
        await self._plane.loaded(request.model_spec(), deadline=request.deadline)
        pinned, signatures = self._plane.signatures(request.model_spec())
        if signature_name == EXPLAIN_SIGNATURE and EXPLAIN_SIGNATURE not in signatures:
            raise UnimplementedError(
                f"Model {shortened(pinned.name)} has no {EXPLAIN_SIGNATURE!r} signature: "
                "it cannot explain"
            )
        name, spec = find_signature(signatures, signature_name)
        row = instances is not _MISSING
        tensors = _from_instances(instances, spec) if row else _from_inputs(inputs, spec)
        result = await self._plane.infer(pinned, name, tensors, deadline=request.deadline)
        return row, result.outputs

    async def classify(self, request: RestRequest) -> RestResponse:
        """``POST …:classify``: tf.Examples (``examples`` + ``context``) → (label, score) lists."""
        body = request.json_object()
        examples = _serialized_examples(body)
        result = await classify(
            self._plane,
            request.model_spec(),
            _signature_name(body),
            examples,
            deadline=request.deadline,
        )
        results = [
            [[_label_json(label), 0.0 if score is None else score] for label, score in classes]
            for classes in result.classifications
        ]
        return _json_response({"results": results})

    async def regress(self, request: RestRequest) -> RestResponse:
        """``POST …:regress``: tf.Examples (``examples`` + ``context``) → one value each."""
        body = request.json_object()
        examples = _serialized_examples(body)
        result = await regress(
            self._plane,
            request.model_spec(),
            _signature_name(body),
            examples,
            deadline=request.deadline,
        )
        return _json_response({"results": result.values})


def _status_json(status: ModelStatus) -> dict[str, Any]:
    return {
        "model_version_status": [
            {
                "version": str(version.version),
                "state": version.state.value,
                "status": {
                    "error_code": "OK" if version.error is None else version.error.code.name,
                    "error_message": "" if version.error is None else version.error.message,
                },
            }
            for version in status.versions
        ]
    }


def _signature_name(body: Mapping[str, Any]) -> str | None:
    name = body.get("signature_name")
    if name is not None and not isinstance(name, str):
        raise InvalidArgumentError(f"'signature_name' must be a string, got {json_type(name)}")
    return name or None


def _input_dtype(spec: SignatureSpec, name: str) -> np.dtype[Any]:
    tensor = spec.inputs.get(name)
    if tensor is None:
        raise InvalidArgumentError(
            f"Unknown input tensor '{name}': the signature takes {sorted(spec.inputs)}"
        )
    return tensor.dtype


def _from_instances(instances: Any, spec: SignatureSpec) -> dict[str, npt.NDArray[Any]]:  # noqa: ANN401
    if not isinstance(instances, list):
        raise InvalidArgumentError(
            f"Expecting 'instances' to be a list, got {json_type(instances)}"
        )
    if not instances:
        raise InvalidArgumentError("No values in 'instances' list")
    if not _is_named(instances[0]):
        if len(spec.inputs) != 1:
            raise InvalidArgumentError(
                "'instances' is a plain list, but the signature takes several inputs "
                f"{sorted(spec.inputs)}: give each instance as an object keyed by input name"
            )
        (name,) = spec.inputs
        for index, instance in enumerate(instances):
            if _is_named(instance):
                raise InvalidArgumentError(
                    f"Expecting value/list but got object at item {index} of 'instances'"
                )
        return {name: to_array(instances, spec.inputs[name].dtype, f"Input '{name}'")}
    names = set(spec.inputs)
    for index, instance in enumerate(instances):
        if not _is_named(instance):
            raise InvalidArgumentError(
                f"Expecting object but got {json_type(instance)} at item {index} of 'instances'"
            )
        if instance.keys() != names:
            for key in instance:
                _input_dtype(spec, key)
            raise InvalidArgumentError(
                f"Item {index} of 'instances' must have exactly the keys {sorted(names)}, "
                f"got {sorted(instance)}"
            )
    return {
        name: to_array(
            [instance[name] for instance in instances],
            spec.inputs[name].dtype,
            f"Input '{name}' of 'instances'",
        )
        for name in spec.inputs
    }


def _from_inputs(inputs: Any, spec: SignatureSpec) -> dict[str, npt.NDArray[Any]]:  # noqa: ANN401
    if not _is_named(inputs):
        if len(spec.inputs) != 1:
            raise InvalidArgumentError(
                "'inputs' is a plain value/list, but the signature takes several inputs "
                f"{sorted(spec.inputs)}: give an object keyed by input name"
            )
        (name,) = spec.inputs
        return {name: to_array(inputs, spec.inputs[name].dtype, f"Input '{name}'")}
    for key in inputs:
        _input_dtype(spec, key)
    for name in spec.inputs:
        if name not in inputs:
            raise InvalidArgumentError(f"Missing named input: {name} in 'inputs' object")
    return {
        name: to_array(value, spec.inputs[name].dtype, f"Input '{name}'")
        for name, value in inputs.items()
    }


def _is_named(value: object) -> bool:
    return isinstance(value, dict) and not is_b64(value)


def _output_json(name: str, array: npt.NDArray[Any]) -> Any:  # noqa: ANN401 - JSON-able
    if array.dtype.kind == "O":  # strings
        return strings_to_json(array, as_b64=name.endswith(_BYTES_SUFFIX))
    if array.dtype.kind not in "biufV":  # V: bfloat16 (ml_dtypes)
        raise InvalidArgumentError(
            f"Output tensor '{name}' has dtype {array.dtype}, which JSON cannot carry"
        )
    return numbers_to_json(array)


def _row_predictions(outputs: Mapping[str, npt.NDArray[Any]]) -> Any:  # noqa: ANN401
    for name, array in outputs.items():
        if array.ndim == 0:
            raise InvalidArgumentError(
                f"Tensor name: {name} has no batch dimension: the row format needs one "
                "(use 'inputs' for the columnar format)"
            )
    if len(outputs) == 1:  # the common case, without the bookkeeping of several outputs
        ((name, array),) = outputs.items()
        return _output_json(name, array)
    sizes = {name: array.shape[0] for name, array in outputs.items()}
    batch = next(iter(sizes.values()))
    for name, size in sizes.items():
        if size != batch:
            raise InvalidArgumentError(
                f"Tensor name: {name} has inconsistent batch size: {size} expecting: {batch}"
            )
    values = [(name, _output_json(name, array)) for name, array in outputs.items()]
    return [{name: value[index] for name, value in values} for index in range(batch)]


def _columnar_outputs(outputs: Mapping[str, npt.NDArray[Any]]) -> Any:  # noqa: ANN401
    if len(outputs) == 1:  # the common case: the bare value
        ((name, array),) = outputs.items()
        return _output_json(name, array)
    return {name: _output_json(name, array) for name, array in outputs.items()}


def _json_response(body: dict[str, Any]) -> RestResponse:
    return RestResponse(200, json_codec.dumps(body))


def _serialized_examples(body: Mapping[str, Any]) -> npt.NDArray[Any]:
    examples = body.get("examples", _MISSING)
    if examples is _MISSING:
        raise InvalidArgumentError("Missing 'examples' key")
    if not isinstance(examples, list):
        raise InvalidArgumentError(f"'examples' must be a list, got {json_type(examples)}")
    if not examples:
        raise InvalidArgumentError("'examples' is empty")
    context = body.get("context", {})
    if not isinstance(context, dict):
        raise InvalidArgumentError(f"'context' must be an object, got {json_type(context)}")
    decoded = []
    for index, example in enumerate(examples):
        if not isinstance(example, dict):
            raise InvalidArgumentError(
                f"Item {index} of 'examples' must be an object, got {json_type(example)}"
            )
        decoded.append(make_example(_features(example, f"Item {index} of 'examples'")))
    context_example = make_example(_features(context, "'context'")) if context else None
    return serialize_examples(decoded, context_example)


def _features(value: dict[str, Any], what: str) -> dict[str, Any]:
    return {name: _feature(item, f"{what}, feature '{name}'") for name, item in value.items()}


def _feature(value: Any, what: str) -> Any:  # noqa: ANN401
    if isinstance(value, list):
        return [_feature_element(item, what) for item in value]
    return _feature_element(value, what)


def _feature_element(value: Any, what: str) -> Any:  # noqa: ANN401
    if is_b64(value):
        return decode_b64(value["b64"], what)
    if isinstance(value, (str, int, float)):  # bool is an int: stored as int64, as TF Serving
        return value
    raise InvalidArgumentError(f"{what} has an element of unexpected JSON type: {json_type(value)}")


def _label_json(label: bytes | None) -> Any:  # noqa: ANN401
    if label is None:
        return ""
    try:
        return label.decode("utf-8")
    except UnicodeDecodeError:
        return strings_to_json(np.array(label, dtype=object), as_b64=True)
