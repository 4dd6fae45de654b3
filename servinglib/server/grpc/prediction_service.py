"""TF Serving's PredictionService: Predict, Classify, Regress, MultiInference, GetModelMetadata."""

from __future__ import annotations

from typing import Any, Final, final

from servinglib.codecs.limits import DEFAULT_LIMITS, DecodeLimits
from servinglib.codecs.tensor import fill_proto
from servinglib.errors import InvalidArgumentError, UnimplementedError
from servinglib.protos import (
    classification_pb2,
    get_model_metadata_pb2,
    inference_pb2,
    predict_pb2,
    regression_pb2,
)
from servinglib.servable import CLASSIFY_METHOD, REGRESS_METHOD
from servinglib.server.grpc._convert import (
    deadline_of,
    fill_model_spec,
    model_spec_of,
    tensors_of,
)
from servinglib.server.grpc._examples import (
    classification_result,
    regression_result,
    serialized_examples,
)
from servinglib.server.grpc._rpc import Context, Rpc
from servinglib.server.grpc._step import Step, Steps
from servinglib.server.model_spec import ModelSpec
from servinglib.server.plane.classify_regress import (
    ExamplesCall,
    classified,
    examples_call,
    regressed,
)
from servinglib.server.plane.data_plane import DataPlane, InferenceResult
from servinglib.server.plane.metadata import SIGNATURE_DEF_MAP_TYPE_URL, signature_def_map

SERVICE: Final = "tensorflow.serving.PredictionService"
SIGNATURE_DEF_FIELD: Final = "signature_def"


@final
class PredictionServicer:
    """TF Serving's PredictionService over a DataPlane (TF Serving's semantics and messages).

    Responses say which version served (``model_spec.version``) and the
    signature used.  ``tensor_content`` selects how Predict encodes outputs;
    ``decode_limits`` bounds the input tensors Predict decodes.
    Thread-safe: it holds no mutable state.
    """

    def __init__(
        self,
        plane: DataPlane,
        *,
        tensor_content: bool = False,
        decode_limits: DecodeLimits = DEFAULT_LIMITS,
    ) -> None:
        self._plane = plane
        self._tensor_content = tensor_content
        self._decode_limits = decode_limits

    def rpcs(self) -> list[Rpc[Any]]:
        """The service's RPCs, for registration under :data:`SERVICE`."""
        return [
            Rpc("Predict", "predict", predict_pb2.PredictRequest, self.predict, _model_name),
            Rpc(
                "Classify",
                "classify",
                classification_pb2.ClassificationRequest,
                self.classify,
                _model_name,
            ),
            Rpc("Regress", "regress", regression_pb2.RegressionRequest, self.regress, _model_name),
            Rpc(
                "MultiInference",
                "multi_inference",
                inference_pb2.MultiInferenceRequest,
                self.multi_inference,
                _first_task_model_name,
            ),
            Rpc(
                "GetModelMetadata",
                "metadata",
                get_model_metadata_pb2.GetModelMetadataRequest,
                self.get_model_metadata,
                _model_name,
            ),
        ]

    def predict(
        self, request: predict_pb2.PredictRequest, context: Context
    ) -> Steps[predict_pb2.PredictResponse]:
        """Runs the signature on the inputs; the outputs (all, or ``output_filter``'s)."""
        spec = model_spec_of(request.model_spec, request.HasField("model_spec"))
        inputs = tensors_of(request.inputs, self._decode_limits)
        plane = self._plane
        result = yield from Step(
            plane.infer,
            plane.infer_blocking,
            spec,
            spec.signature_name or None,
            inputs,
            request.output_filter or None,
            deadline=deadline_of(context),
        )
        response = predict_pb2.PredictResponse()
        fill_model_spec(
            response.model_spec, result.model_name, result.version, result.signature_name
        )
        as_content = self._tensor_content
        outputs = response.outputs
        for name, value in result.outputs.items():
            fill_proto(outputs[name], value, as_content=as_content)
        return response

    def classify(
        self, request: classification_pb2.ClassificationRequest, context: Context
    ) -> Steps[classification_pb2.ClassificationResponse]:
        """Classifies the request's tf.Examples with a classify signature."""
        spec = model_spec_of(request.model_spec, request.HasField("model_spec"))
        examples = serialized_examples(request, request.HasField("input"))
        signature = spec.signature_name or None
        deadline = deadline_of(context)
        yield from Step(self._plane.loaded, self._plane.loaded_blocking, spec, deadline=deadline)
        call = examples_call(self._plane, CLASSIFY_METHOD, spec, signature, examples)
        output = yield from self._infer(call, deadline)
        result = classified(self._plane, call, output)
        response = classification_pb2.ClassificationResponse()
        fill_model_spec(
            response.model_spec, result.model_name, result.version, result.signature_name
        )
        classification_result(result.classifications, response.result)
        return response

    def regress(
        self, request: regression_pb2.RegressionRequest, context: Context
    ) -> Steps[regression_pb2.RegressionResponse]:
        """Regresses the request's tf.Examples with a regress signature."""
        spec = model_spec_of(request.model_spec, request.HasField("model_spec"))
        examples = serialized_examples(request, request.HasField("input"))
        signature = spec.signature_name or None
        deadline = deadline_of(context)
        yield from Step(self._plane.loaded, self._plane.loaded_blocking, spec, deadline=deadline)
        call = examples_call(self._plane, REGRESS_METHOD, spec, signature, examples)
        output = yield from self._infer(call, deadline)
        result = regressed(self._plane, call, output)
        response = regression_pb2.RegressionResponse()
        fill_model_spec(
            response.model_spec, result.model_name, result.version, result.signature_name
        )
        regression_result(result.values, response.result)
        return response

    def multi_inference(
        self, request: inference_pb2.MultiInferenceRequest, context: Context
    ) -> Steps[inference_pb2.MultiInferenceResponse]:
        """Runs classify and regress tasks of one model version on the same examples.

        As TF Serving: at least one task; every task names the same model;
        no signature twice; methods classify or regress (else UNIMPLEMENTED).
        The version is the one the first task's spec selects.
        """
        tasks = list(request.tasks)
        if not tasks:
            raise InvalidArgumentError("Tasks is empty.")
        specs = [model_spec_of(task.model_spec, task.HasField("model_spec")) for task in tasks]
        if any(spec.name != specs[0].name for spec in specs):
            raise InvalidArgumentError(
                "All ModelSpecs in a MultiInferenceRequest must access the same model name."
            )
        signatures = [spec.signature_name or "serving_default" for spec in specs]
        for index, name in enumerate(signatures):
            if name in signatures[:index]:
                raise InvalidArgumentError(f"Duplicate evaluation of signature: {name}")
        for task in tasks:
            if task.method_name not in (CLASSIFY_METHOD, REGRESS_METHOD):
                raise UnimplementedError(f"Unsupported signature method_name: {task.method_name}")
        examples = serialized_examples(request, request.HasField("input"))
        deadline = deadline_of(context)
        plane = self._plane
        yield from Step(plane.loaded, plane.loaded_blocking, specs[0], deadline=deadline)
        version = self._plane.questions.resolve_version(specs[0])
        response = inference_pb2.MultiInferenceResponse()
        for task, spec, signature in zip(tasks, specs, signatures, strict=True):
            pinned = ModelSpec.specific(spec.name, version)
            entry = response.results.add()
            call = examples_call(self._plane, task.method_name, pinned, signature, examples)
            output = yield from self._infer(call, deadline)
            if task.method_name == CLASSIFY_METHOD:
                labels = classified(self._plane, call, output, log_request=False).classifications
                classification_result(labels, entry.classification_result)
            else:
                values = regressed(self._plane, call, output, log_request=False).values
                regression_result(values, entry.regression_result)
            fill_model_spec(entry.model_spec, spec.name, version, signature)
        logger = self._plane.request_logger
        if (logging := logger.sampled(specs[0].name)) is not None:
            logger.log(logging, specs[0].name, "multi_inference", request, response)
        return response

    def get_model_metadata(
        self, request: get_model_metadata_pb2.GetModelMetadataRequest, _context: Context
    ) -> get_model_metadata_pb2.GetModelMetadataResponse:
        """The version's SignatureDefMap, packed with TF Serving's type URL."""
        spec = model_spec_of(request.model_spec, request.HasField("model_spec"))
        fields = list(request.metadata_field)
        if not fields:
            raise InvalidArgumentError(
                "GetModelMetadataRequest must specify at least one metadata_field"
            )
        for field in fields:
            if field != SIGNATURE_DEF_FIELD:
                raise InvalidArgumentError(f"Metadata field {field} is not supported")
        metadata = self._plane.questions.model_metadata(spec)
        response = get_model_metadata_pb2.GetModelMetadataResponse()
        fill_model_spec(response.model_spec, metadata.name, metadata.version)
        packed = response.metadata[SIGNATURE_DEF_FIELD]
        packed.type_url = SIGNATURE_DEF_MAP_TYPE_URL
        packed.value = signature_def_map(metadata.signatures).SerializeToString()
        return response

    def _infer(self, call: ExamplesCall, deadline: float | None) -> Step[InferenceResult]:
        """The inference of a classify or regress ``call`` (whose result is logged, not it)."""
        plane = self._plane
        return Step(
            plane.infer,
            plane.infer_blocking,
            call.model_spec,
            call.signature_name,
            call.inputs,
            deadline=deadline,
            log_request=False,
        )


def _model_name(request: Any) -> str:  # noqa: ANN401 - any request with a model_spec
    name: str = request.model_spec.name
    return name


def _first_task_model_name(request: inference_pb2.MultiInferenceRequest) -> str:
    return request.tasks[0].model_spec.name if request.tasks else ""
