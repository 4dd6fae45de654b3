"""PredictionService through tensorflow-serving-api's own stubs and messages."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
import tensorflow as tf
from grpc_servers import serving
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    inference_pb2,
    input_pb2,
    predict_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
)

from servinglib.server.server_core import ServerCore
from servinglib.testing import wait_until

CLASSIFY = "classify_x_to_y"
REGRESS = "regress_x_to_y"


def stub(channel: grpc.Channel) -> prediction_service_pb2_grpc.PredictionServiceStub:
    """The official PredictionService stub on ``channel``."""
    return prediction_service_pb2_grpc.PredictionServiceStub(channel)


def predict_request(
    model: str, signature: str = "", **inputs: np.ndarray
) -> predict_pb2.PredictRequest:
    """A PredictRequest with ``inputs`` encoded by TensorFlow's own make_tensor_proto."""
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model
    request.model_spec.signature_name = signature
    for name, value in inputs.items():
        request.inputs[name].CopyFrom(tf.make_tensor_proto(value))
    return request


def examples_input(xs: list[float], context: dict[str, float] | None = None) -> input_pb2.Input:
    """An Input of tf.Examples with float feature ``x`` (and a context, if given)."""
    result = input_pb2.Input()
    target = result.example_list_with_context if context is not None else result.example_list
    for x in xs:
        target.examples.add().features.feature["x"].float_list.value.append(x)
    if context is not None:
        for key, value in context.items():
            result.example_list_with_context.context.features.feature[key].float_list.value.append(
                value
            )
    return result


def test_predict_half_plus_two_reports_the_version_that_served(channel: grpc.Channel) -> None:
    """Predict on the SavedModel answers y = 0.5x + 3 from version 2, the latest."""
    response = stub(channel).Predict(
        predict_request("half_plus_two", x=np.array([1.0, 2.0, 5.0], np.float32)), timeout=30
    )
    assert tf.make_ndarray(response.outputs["y"]).tolist() == [3.5, 4.0, 5.5]
    assert response.model_spec.name == "half_plus_two"
    assert response.model_spec.version.value == 2
    assert response.model_spec.signature_name == "serving_default"


@pytest.mark.parametrize(("selector", "expected"), [("version", [2.5]), ("label", [3.5])])
def test_predict_by_version_or_label(
    channel: grpc.Channel, selector: str, expected: list[float]
) -> None:
    """A version number (1) or a label (canary → 2) picks the version that serves."""
    request = predict_request("half_plus_two", x=np.array([1.0], np.float32))
    if selector == "version":
        request.model_spec.version.value = 1
    else:
        request.model_spec.version_label = "canary"
    response = stub(channel).Predict(request, timeout=30)
    assert tf.make_ndarray(response.outputs["y"]).tolist() == expected


def test_predict_many_dtypes_round_trip(channel: grpc.Channel) -> None:
    """Every numeric dtype TF encodes (typed fields, half_val, bool_val) comes back equal."""
    values = {
        "b": np.array([True, False]),
        "i8": np.array([-128, 127], np.int8),
        "i16": np.array([-3, 4], np.int16),
        "i32": np.array([-5, 6], np.int32),
        "i64": np.array([-(2**40), 2**40], np.int64),
        "u8": np.array([0, 255], np.uint8),
        "u16": np.array([1, 65535], np.uint16),
        "u32": np.array([1, 2**32 - 1], np.uint32),
        "u64": np.array([1, 2**64 - 1], np.uint64),
        "f16": np.array([0.5, -2.0], np.float16),
        "f32": np.array([1.5, -2.5], np.float32),
        "f64": np.array([1e300, -1e-300], np.float64),
    }
    response = stub(channel).Predict(predict_request("py", "types", **values), timeout=30)
    for name, value in values.items():
        got = tf.make_ndarray(response.outputs[name])
        assert got.dtype == value.dtype, name
        assert got.tolist() == value.tolist(), name


def test_predict_strings_and_scalar_broadcast(channel: grpc.Channel) -> None:
    """String tensors decode as bytes; a single typed value fills the whole shape, as TF does."""
    response = stub(channel).Predict(
        predict_request("py", "strings", s=np.array([b"ab", "ü".encode()], dtype=object)),
        timeout=30,
    )
    assert tf.make_ndarray(response.outputs["upper"]).tolist() == [b"AB", "ü".encode().upper()]
    request = predict_request("py")
    request.inputs["x"].CopyFrom(tf.make_tensor_proto(7.0, dtype=tf.float32, shape=[3]))
    response = stub(channel).Predict(request, timeout=30)
    assert tf.make_ndarray(response.outputs["y"]).tolist() == [8.0, 8.0, 8.0]


def test_predict_tensor_content_input_and_output_filter(channel: grpc.Channel) -> None:
    """tensor_content inputs decode; output_filter limits the outputs to those named."""
    request = predict_request("py")
    tensor = request.inputs["x"]
    tensor.dtype = tf.float32.as_datatype_enum
    tensor.tensor_shape.dim.add(size=2)
    tensor.tensor_content = np.array([1.0, 2.0], "<f4").tobytes()
    request.output_filter.append("z")
    response = stub(channel).Predict(request, timeout=30)
    assert list(response.outputs) == ["z"]
    assert tf.make_ndarray(response.outputs["z"]).tolist() == [2.0, 4.0]


def test_predict_typed_fields_by_default(channel: grpc.Channel) -> None:
    """Responses use the typed fields (float_val), as TF Serving emits them."""
    response = stub(channel).Predict(
        predict_request("py", x=np.array([1.0], np.float32)), timeout=30
    )
    assert list(response.outputs["y"].float_val) == [2.0]
    assert not response.outputs["y"].tensor_content


def test_get_model_metadata_unpacks_as_signature_def_map(channel: grpc.Channel) -> None:
    """GetModelMetadata's signature_def Any unpacks into TF Serving's SignatureDefMap."""
    request = get_model_metadata_pb2.GetModelMetadataRequest()
    request.model_spec.name = "half_plus_two"
    request.metadata_field.append("signature_def")
    response = stub(channel).GetModelMetadata(request, timeout=30)
    assert response.model_spec.version.value == 2
    signatures = get_model_metadata_pb2.SignatureDefMap()
    assert response.metadata["signature_def"].Unpack(signatures)
    default = signatures.signature_def["serving_default"]
    assert default.inputs["x"].dtype == tf.float32.as_datatype_enum
    assert signatures.signature_def[CLASSIFY].method_name == "tensorflow/serving/classify"


def test_classify_and_regress(channel: grpc.Channel) -> None:
    """Classify gives per-example scores, Regress per-example values, from version 2."""
    request = classification_pb2.ClassificationRequest()
    request.model_spec.name = "half_plus_two"
    request.model_spec.signature_name = CLASSIFY
    request.input.CopyFrom(examples_input([1.0, 2.0]))
    response = stub(channel).Classify(request, timeout=30)
    scores = [[c.score for c in item.classes] for item in response.result.classifications]
    assert scores == [[3.5], [4.0]]
    assert response.model_spec.version.value == 2
    regression = regression_pb2.RegressionRequest()
    regression.model_spec.name = "half_plus_two"
    regression.model_spec.signature_name = REGRESS
    regression.input.CopyFrom(examples_input([2.0], context={"unused": 1.0}))
    answer = stub(channel).Regress(regression, timeout=30)
    assert [r.value for r in answer.result.regressions] == [4.0]
    assert answer.model_spec.signature_name == REGRESS


def test_context_features_are_merged_and_examples_win(channel: grpc.Channel) -> None:
    """With ExampleListWithContext, context features fill in and the example's own win."""
    request = regression_pb2.RegressionRequest()
    request.model_spec.name = "half_plus_two"
    request.model_spec.signature_name = REGRESS
    given = request.input.example_list_with_context
    given.context.features.feature["x"].float_list.value.append(10.0)
    given.examples.add()
    given.examples.add().features.feature["x"].float_list.value.append(2.0)
    response = stub(channel).Regress(request, timeout=30)
    assert [r.value for r in response.result.regressions] == [8.0, 4.0]


def test_multi_inference_runs_tasks_on_one_version(channel: grpc.Channel) -> None:
    """MultiInference runs a classify and a regress task on the same examples."""
    request = inference_pb2.MultiInferenceRequest()
    for signature, method in ((CLASSIFY, "classify"), (REGRESS, "regress")):
        task = request.tasks.add()
        task.model_spec.name = "half_plus_two"
        task.model_spec.signature_name = signature
        task.method_name = f"tensorflow/serving/{method}"
    request.input.CopyFrom(examples_input([1.0]))
    response = stub(channel).MultiInference(request, timeout=30)
    classified, regressed = response.results
    assert classified.classification_result.classifications[0].classes[0].score == 3.5
    assert regressed.regression_result.regressions[0].value == 3.5
    assert regressed.model_spec.version.value == 2


def test_multi_inference_rejects_mixed_models_and_methods(channel: grpc.Channel) -> None:
    """Tasks on two models are INVALID_ARGUMENT; an unknown method is UNIMPLEMENTED."""
    request = inference_pb2.MultiInferenceRequest()
    for name in ("half_plus_two", "py"):
        task = request.tasks.add()
        task.model_spec.name = name
        task.method_name = "tensorflow/serving/regress"
    request.input.CopyFrom(examples_input([1.0]))
    with pytest.raises(grpc.RpcError) as caught:
        stub(channel).MultiInference(request, timeout=30)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    del request.tasks[1]
    request.tasks[0].method_name = "tensorflow/serving/predict"
    with pytest.raises(grpc.RpcError) as caught:
        stub(channel).MultiInference(request, timeout=30)
    assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED


@pytest.mark.parametrize(
    ("mutate", "code", "words"),
    [
        (lambda r: r.model_spec.Clear(), grpc.StatusCode.INVALID_ARGUMENT, "model name"),
        (lambda r: setattr(r.model_spec, "name", "nope"), grpc.StatusCode.NOT_FOUND, "nope"),
        (
            lambda r: setattr(r.model_spec.version, "value", 9),
            grpc.StatusCode.NOT_FOUND,
            "half_plus_two",
        ),
        (
            lambda r: setattr(r.model_spec, "version_label", "gold"),
            grpc.StatusCode.INVALID_ARGUMENT,
            "gold",
        ),
        (
            lambda r: r.inputs["x2"].CopyFrom(r.inputs["x"]),
            grpc.StatusCode.INVALID_ARGUMENT,
            "x2",
        ),
        (
            lambda r: setattr(r.inputs["x"], "tensor_content", b"\0" * 5),
            grpc.StatusCode.INVALID_ARGUMENT,
            "'x'",
        ),
        (
            lambda r: setattr(r.inputs["x"], "dtype", 99),
            grpc.StatusCode.INVALID_ARGUMENT,
            "'x'",
        ),
        (
            lambda r: r.output_filter.append("nope"),
            grpc.StatusCode.INVALID_ARGUMENT,
            "nope",
        ),
        (
            lambda r: setattr(r.model_spec, "signature_name", "nope"),
            grpc.StatusCode.FAILED_PRECONDITION,
            "nope",
        ),
    ],
)
def test_predict_client_mistakes(
    core: ServerCore, mutate: object, code: grpc.StatusCode, words: str
) -> None:
    """Client mistakes get INVALID_ARGUMENT / NOT_FOUND / FAILED_PRECONDITION naming the culprit."""
    request = predict_request("half_plus_two", x=np.array([1.0, 2.0], np.float32))
    mutate(request)  # type: ignore[operator]
    # A server of its own: no other test's record can arrive late in its list.
    with serving(core) as served, served.channel() as channel:
        with pytest.raises(grpc.RpcError) as caught:
            stub(channel).Predict(request, timeout=30)
        assert caught.value.code() == code
        assert words in caught.value.details()
        # The record is written when the handler ends, which may be just after the client hears.
        wait_until(lambda: len(served.records) == 1)
    assert served.records[0].code.name == code.name


def test_client_deadline_is_deadline_exceeded(channel: grpc.Channel) -> None:
    """A call outliving the client's deadline fails DEADLINE_EXCEEDED and the server goes on."""
    with pytest.raises(grpc.RpcError) as caught:
        stub(channel).Predict(
            predict_request("py", "never", x=np.array([1.0], np.float32)), timeout=0.5
        )
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    response = stub(channel).Predict(
        predict_request("py", x=np.array([1.0], np.float32)), timeout=30
    )
    assert list(response.outputs["y"].float_val) == [2.0]


def test_every_rpc_reports_one_record(core: ServerCore) -> None:
    """Each finished RPC yields one RpcRecord with model, API, entrypoint, code and latency."""
    with serving(core) as served, served.channel() as channel:  # records of this RPC only
        stub(channel).Predict(predict_request("py", x=np.array([1.0], np.float32)), timeout=30)
        wait_until(lambda: len(served.records) > 0)
    (record,) = served.records
    assert (record.service, record.method, record.api) == (
        "tensorflow.serving.PredictionService",
        "Predict",
        "predict",
    )
    assert (record.model_name, record.entrypoint, record.code.name) == ("py", "GRPC", "OK")
    assert record.latency_s > 0
