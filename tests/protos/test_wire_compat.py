"""Tests that servinglib's protos are wire-compatible with TensorFlow's and TF Serving's own.

The official classes (tensorflow-serving-api, TensorFlow's protos) import TensorFlow, once for
this module.  Both sets of classes live in one process, in one descriptor pool.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from google.protobuf import any_pb2, descriptor, descriptor_pb2, descriptor_pool, text_format
from google.protobuf import message as pb_message
from tensorflow.core.example import example_pb2 as tf_example_pb2
from tensorflow.core.example import feature_pb2 as tf_feature_pb2
from tensorflow.core.framework import tensor_pb2 as tf_tensor_pb2
from tensorflow.core.framework import types_pb2 as tf_types_pb2
from tensorflow.core.protobuf import meta_graph_pb2 as tf_meta_graph_pb2
from tensorflow_serving.apis import classification_pb2 as tfs_classification_pb2
from tensorflow_serving.apis import get_model_metadata_pb2 as tfs_get_model_metadata_pb2
from tensorflow_serving.apis import inference_pb2 as tfs_inference_pb2
from tensorflow_serving.apis import input_pb2 as tfs_input_pb2
from tensorflow_serving.apis import logging_pb2 as tfs_logging_pb2
from tensorflow_serving.apis import model_pb2 as tfs_model_pb2
from tensorflow_serving.apis import predict_pb2 as tfs_predict_pb2
from tensorflow_serving.apis import prediction_log_pb2 as tfs_prediction_log_pb2
from tensorflow_serving.apis import regression_pb2 as tfs_regression_pb2
from tensorflow_serving.config import file_system_storage_path_source_pb2 as tfs_fs_source_pb2
from tensorflow_serving.config import logging_config_pb2 as tfs_logging_config_pb2
from tensorflow_serving.config import model_server_config_pb2 as tfs_model_server_config_pb2
from tensorflow_serving.config import platform_config_pb2 as tfs_platform_config_pb2

from servinglib.protos import (
    classification_pb2,
    example_pb2,
    file_system_storage_path_source_pb2,
    get_model_metadata_pb2,
    inference_pb2,
    input_pb2,
    logging_config_pb2,
    logging_pb2,
    meta_graph_pb2,
    model_pb2,
    model_server_config_pb2,
    platform_config_pb2,
    predict_pb2,
    prediction_log_pb2,
    regression_pb2,
    tensor_pb2,
)

OUR_MODULES = [
    classification_pb2,
    example_pb2,
    file_system_storage_path_source_pb2,
    get_model_metadata_pb2,
    inference_pb2,
    input_pb2,
    logging_config_pb2,
    logging_pb2,
    meta_graph_pb2,
    model_pb2,
    model_server_config_pb2,
    platform_config_pb2,
    predict_pb2,
    prediction_log_pb2,
    regression_pb2,
    tensor_pb2,
]
OUR_PACKAGE = "servinglib.tfs"

# servinglib's own extensions of TF Serving's messages: fields numbered 1000 and up (far from
# TF Serving's), and the messages only they use. TF Serving's files and messages still parse.
EXTENSION_FIELDS = frozenset(
    {
        ("servinglib.tfs.ModelConfig", 1000),
        ("servinglib.tfs.LogMetadata", 1000),
        ("servinglib.tfs.LogMetadata", 1001),
    }
)
EXTENSION_MESSAGES = frozenset(
    {
        "servinglib.tfs.TrafficRule",
        "servinglib.tfs.ShadowRule",
        "servinglib.tfs.LoggedParameter",
        "servinglib.tfs.LogMetadata.RequestParametersEntry",
    }
)
SIGNATURE_DEF_MAP_URL = "type.googleapis.com/tensorflow.serving.SignatureDefMap"

# -- richly populated official messages --------------------------------------------------


def official_tensors() -> dict[str, tf_tensor_pb2.TensorProto]:
    """A tensor of every value field, plus tensor_content, a scalar and a named dimension."""
    tensors = {
        "float": tf_tensor_pb2.TensorProto(dtype=tf_types_pb2.DT_FLOAT, float_val=[1.5, -2.0]),
        "double": tf_tensor_pb2.TensorProto(dtype=tf_types_pb2.DT_DOUBLE, double_val=[1e300, 0]),
        "int": tf_tensor_pb2.TensorProto(dtype=tf_types_pb2.DT_INT32, int_val=[-(2**31), 7]),
        "int64": tf_tensor_pb2.TensorProto(dtype=tf_types_pb2.DT_INT64, int64_val=[-(2**63), 1]),
        "uint32": tf_tensor_pb2.TensorProto(dtype=tf_types_pb2.DT_UINT32, uint32_val=[2**32 - 1]),
        "uint64": tf_tensor_pb2.TensorProto(dtype=tf_types_pb2.DT_UINT64, uint64_val=[2**64 - 1]),
        "bool": tf_tensor_pb2.TensorProto(dtype=tf_types_pb2.DT_BOOL, bool_val=[True, False]),
        "half": tf_tensor_pb2.TensorProto(dtype=tf_types_pb2.DT_HALF, half_val=[0x3C00, 0xFBFF]),
        "string": tf_tensor_pb2.TensorProto(
            dtype=tf_types_pb2.DT_STRING, string_val=[b"a", b"\xff"]
        ),
        "scomplex": tf_tensor_pb2.TensorProto(
            dtype=tf_types_pb2.DT_COMPLEX64, scomplex_val=[1.0, -1.0]
        ),
        "dcomplex": tf_tensor_pb2.TensorProto(
            dtype=tf_types_pb2.DT_COMPLEX128, dcomplex_val=[0.5, 2.0]
        ),
        "content": tf_tensor_pb2.TensorProto(
            dtype=tf_types_pb2.DT_INT64,
            tensor_content=np.arange(6, dtype="<i8").tobytes(),
            version_number=1,
        ),
    }
    for tensor in tensors.values():
        tensor.tensor_shape.dim.add(size=2, name="batch")
    tensors["content"].tensor_shape.dim.add(size=3)
    tensors["scalar"] = tf_tensor_pb2.TensorProto(dtype=tf_types_pb2.DT_FLOAT, float_val=[3.0])
    tensors["scalar"].tensor_shape.SetInParent()
    return tensors


def official_model_spec(*, label: bool = False) -> tfs_model_pb2.ModelSpec:
    spec = tfs_model_pb2.ModelSpec(name="half_plus_two", signature_name="serving_default")
    if label:
        spec.version_label = "stable"
    else:
        spec.version.value = 2
    return spec


def official_example(offset: float = 0.0) -> tf_example_pb2.Example:
    """An Example with a feature of each kind, several values each, and one with no kind."""
    example = tf_example_pb2.Example()
    features = example.features.feature
    features["bytes"].bytes_list.value.extend([b"x", b"", b"\x00\xff"])
    features["float"].float_list.value.extend([0.5 + offset, -1.25])
    features["int64"].int64_list.value.extend([-(2**63), 0, 2**63 - 1])
    features["empty"].SetInParent()
    return example


def official_input(*, with_context: bool) -> tfs_input_pb2.Input:
    model_input = tfs_input_pb2.Input()
    if with_context:
        model_input.example_list_with_context.examples.extend([official_example(1.0)])
        model_input.example_list_with_context.context.CopyFrom(official_example(2.0))
    else:
        model_input.example_list.examples.extend([official_example(), official_example(3.0)])
    return model_input


def official_predict_request() -> tfs_predict_pb2.PredictRequest:
    request = tfs_predict_pb2.PredictRequest(model_spec=official_model_spec())
    for name, tensor in official_tensors().items():
        request.inputs[name].CopyFrom(tensor)
    request.output_filter.extend(["y", "z"])
    return request


def official_predict_response() -> tfs_predict_pb2.PredictResponse:
    response = tfs_predict_pb2.PredictResponse(model_spec=official_model_spec(label=True))
    for name, tensor in official_tensors().items():
        response.outputs[name].CopyFrom(tensor)
    return response


def official_classification_request() -> tfs_classification_pb2.ClassificationRequest:
    return tfs_classification_pb2.ClassificationRequest(
        model_spec=official_model_spec(), input=official_input(with_context=False)
    )


def official_classification_result() -> tfs_classification_pb2.ClassificationResult:
    result = tfs_classification_pb2.ClassificationResult()
    for example in range(2):
        classes = result.classifications.add().classes
        classes.add(label=f"cat{example}", score=0.75)
        classes.add(label="dog", score=0.25)
        classes.add(score=-1.0)
    return result


def official_classification_response() -> tfs_classification_pb2.ClassificationResponse:
    return tfs_classification_pb2.ClassificationResponse(
        model_spec=official_model_spec(), result=official_classification_result()
    )


def official_regression_request() -> tfs_regression_pb2.RegressionRequest:
    return tfs_regression_pb2.RegressionRequest(
        model_spec=official_model_spec(label=True), input=official_input(with_context=True)
    )


def official_regression_result() -> tfs_regression_pb2.RegressionResult:
    result = tfs_regression_pb2.RegressionResult()
    result.regressions.add(value=2.5)
    result.regressions.add(value=-3.0)
    return result


def official_regression_response() -> tfs_regression_pb2.RegressionResponse:
    return tfs_regression_pb2.RegressionResponse(
        model_spec=official_model_spec(), result=official_regression_result()
    )


def official_multi_inference_request() -> tfs_inference_pb2.MultiInferenceRequest:
    request = tfs_inference_pb2.MultiInferenceRequest(input=official_input(with_context=True))
    request.tasks.add(model_spec=official_model_spec(), method_name="tensorflow/serving/classify")
    request.tasks.add(
        model_spec=official_model_spec(label=True), method_name="tensorflow/serving/regress"
    )
    return request


def official_multi_inference_response() -> tfs_inference_pb2.MultiInferenceResponse:
    response = tfs_inference_pb2.MultiInferenceResponse()
    response.results.add(
        model_spec=official_model_spec(), classification_result=official_classification_result()
    )
    response.results.add(
        model_spec=official_model_spec(label=True), regression_result=official_regression_result()
    )
    return response


def official_signature_def_map() -> tfs_get_model_metadata_pb2.SignatureDefMap:
    signatures = tfs_get_model_metadata_pb2.SignatureDefMap()
    predict = signatures.signature_def["serving_default"]
    predict.method_name = "tensorflow/serving/predict"
    x = predict.inputs["x"]
    x.name = "x:0"
    x.dtype = tf_types_pb2.DT_FLOAT
    x.tensor_shape.dim.add(size=-1)
    x.tensor_shape.dim.add(size=3, name="features")
    y = predict.outputs["y"]
    y.name = "y:0"
    y.dtype = tf_types_pb2.DT_STRING
    y.tensor_shape.unknown_rank = True
    predict.defaults["k"].CopyFrom(official_tensors()["int"])
    classify = signatures.signature_def["classify_x_to_y"]
    classify.method_name = "tensorflow/serving/classify"
    classify.inputs["inputs"].name = "tf_example:0"
    classify.inputs["inputs"].dtype = tf_types_pb2.DT_STRING
    return signatures


def official_get_model_metadata_request() -> tfs_get_model_metadata_pb2.GetModelMetadataRequest:
    return tfs_get_model_metadata_pb2.GetModelMetadataRequest(
        model_spec=official_model_spec(), metadata_field=["signature_def"]
    )


def official_get_model_metadata_response() -> tfs_get_model_metadata_pb2.GetModelMetadataResponse:
    response = tfs_get_model_metadata_pb2.GetModelMetadataResponse(model_spec=official_model_spec())
    response.metadata["signature_def"].Pack(official_signature_def_map(), deterministic=True)
    return response


def official_sequence_example() -> tf_example_pb2.SequenceExample:
    sequence = tf_example_pb2.SequenceExample(context=official_example().features)
    frames = sequence.feature_lists.feature_list["frames"].feature
    frames.add().float_list.value.extend([1.0, 2.0])
    frames.add().float_list.value.extend([3.0])
    sequence.feature_lists.feature_list["words"].feature.add().bytes_list.value.append(b"hi")
    return sequence


def official_log(kind: str) -> tfs_prediction_log_pb2.PredictionLog:
    """A PredictionLog of ``kind`` (its oneof field name), with metadata, request and response."""
    log = tfs_prediction_log_pb2.PredictionLog()
    log.log_metadata.model_spec.CopyFrom(official_model_spec())
    request, response = {
        "predict_log": (official_predict_request, official_predict_response),
        "classify_log": (official_classification_request, official_classification_response),
        "regress_log": (official_regression_request, official_regression_response),
        "multi_inference_log": (
            official_multi_inference_request,
            official_multi_inference_response,
        ),
    }[kind]
    entry = getattr(log, kind)
    entry.request.CopyFrom(request())
    entry.response.CopyFrom(response())
    return log


def official_logging_config() -> tfs_logging_config_pb2.LoggingConfig:
    """A LoggingConfig with every field set, a per-task sampling config with task 0 among them."""
    logging_config = tfs_logging_config_pb2.LoggingConfig()
    logging_config.log_collector_config.type = "file"
    logging_config.log_collector_config.filename_prefix = "/tmp/log"
    sampling = logging_config.sampling_config
    sampling.sampling_rate = 0.25
    sampling.attributes = (
        tfs_logging_config_pb2.SamplingConfig.ATTR_REQUEST_ORIGIN
        | tfs_logging_config_pb2.SamplingConfig.ATTR_REQUEST_CRITICALITY
    )
    sampling.per_task_sampling_configs.add(dc="eu", task_index=0, sampling_rate=1.0)
    sampling.per_task_sampling_configs.add(dc="us", sampling_rate=0.5)
    logging_config.custom_logging_config.Pack(official_model_spec(), deterministic=True)
    return logging_config


def official_model_server_config() -> tfs_model_server_config_pb2.ModelServerConfig:
    """Three models, one per version policy, with labels, logging and the legacy model_type."""
    config = tfs_model_server_config_pb2.ModelServerConfig()
    models = config.model_config_list.config
    latest = models.add(name="latest", base_path="/models/latest", model_platform="tensorflow")
    latest.model_version_policy.latest.num_versions = 2
    latest.logging_config.CopyFrom(official_logging_config())
    every = models.add(name="all", base_path="gs://bucket/all", model_platform="python")
    every.model_version_policy.all.SetInParent()
    specific = models.add(
        name="specific",
        base_path="/models/specific",
        model_type=tfs_model_server_config_pb2.TENSORFLOW,
    )
    specific.model_version_policy.specific.versions.extend([42, 43, 2**63 - 1])
    specific.version_labels["stable"] = 42
    specific.version_labels["canary"] = 43
    return config


def official_custom_model_server_config() -> tfs_model_server_config_pb2.ModelServerConfig:
    config = tfs_model_server_config_pb2.ModelServerConfig()
    config.custom_model_config.Pack(official_model_spec(), deterministic=True)
    return config


def official_source_config() -> tfs_fs_source_pb2.FileSystemStoragePathSourceConfig:
    source_config = tfs_fs_source_pb2.FileSystemStoragePathSourceConfig(
        file_system_poll_wait_seconds=-1,
        fail_if_zero_versions_at_startup=True,
        servable_versions_always_present=True,
    )
    servable = source_config.servables.add(servable_name="m", base_path="/models/m")
    servable.servable_version_policy.specific.versions.append(7)
    return source_config


def official_platform_config_map() -> tfs_platform_config_pb2.PlatformConfigMap:
    platforms = tfs_platform_config_pb2.PlatformConfigMap()
    adapter_config = platforms.platform_configs["tensorflow"].source_adapter_config
    adapter_config.Pack(official_model_spec(), deterministic=True)
    platforms.platform_configs["python"].SetInParent()
    return platforms


# (official message factory, our class) of every message the two sides exchange.
CASES: dict[str, tuple[Callable[[], pb_message.Message], type[pb_message.Message]]] = {
    "TensorProto": (lambda: official_tensors()["content"], tensor_pb2.TensorProto),
    "ModelSpec": (official_model_spec, model_pb2.ModelSpec),
    "ModelSpec-label": (lambda: official_model_spec(label=True), model_pb2.ModelSpec),
    "PredictRequest": (official_predict_request, predict_pb2.PredictRequest),
    "PredictResponse": (official_predict_response, predict_pb2.PredictResponse),
    "Example": (official_example, example_pb2.Example),
    "SequenceExample": (official_sequence_example, example_pb2.SequenceExample),
    "Input": (lambda: official_input(with_context=True), input_pb2.Input),
    "ClassificationRequest": (
        official_classification_request,
        classification_pb2.ClassificationRequest,
    ),
    "ClassificationResponse": (
        official_classification_response,
        classification_pb2.ClassificationResponse,
    ),
    "RegressionRequest": (official_regression_request, regression_pb2.RegressionRequest),
    "RegressionResponse": (official_regression_response, regression_pb2.RegressionResponse),
    "MultiInferenceRequest": (
        official_multi_inference_request,
        inference_pb2.MultiInferenceRequest,
    ),
    "MultiInferenceResponse": (
        official_multi_inference_response,
        inference_pb2.MultiInferenceResponse,
    ),
    "SignatureDefMap": (official_signature_def_map, get_model_metadata_pb2.SignatureDefMap),
    "GetModelMetadataRequest": (
        official_get_model_metadata_request,
        get_model_metadata_pb2.GetModelMetadataRequest,
    ),
    "GetModelMetadataResponse": (
        official_get_model_metadata_response,
        get_model_metadata_pb2.GetModelMetadataResponse,
    ),
    "ModelServerConfig": (official_model_server_config, model_server_config_pb2.ModelServerConfig),
    "ModelServerConfig-custom": (
        official_custom_model_server_config,
        model_server_config_pb2.ModelServerConfig,
    ),
    "LoggingConfig": (official_logging_config, logging_config_pb2.LoggingConfig),
    "FileSystemStoragePathSourceConfig": (
        official_source_config,
        file_system_storage_path_source_pb2.FileSystemStoragePathSourceConfig,
    ),
    "PlatformConfigMap": (official_platform_config_map, platform_config_pb2.PlatformConfigMap),
    **{
        f"PredictionLog-{kind}": (
            functools.partial(official_log, kind),
            prediction_log_pb2.PredictionLog,
        )
        for kind in ("predict_log", "classify_log", "regress_log", "multi_inference_log")
    },
}


def wire(message: pb_message.Message) -> bytes:
    """``message``'s bytes with map entries sorted by key, so both sides can be compared."""
    return message.SerializeToString(deterministic=True)


def repack_anys_deterministically(message: pb_message.Message) -> None:
    """Re-serializes a metadata map's Any values with sorted map entries.

    text_format packs an expanded Any without sorting the inner message's
    map entries, so its bytes would vary from run to run.
    """
    metadata = getattr(message, "metadata", None)
    if metadata is None:
        return
    for value in metadata.values():
        inner = tfs_get_model_metadata_pb2.SignatureDefMap()
        value.Unpack(inner)
        value.Pack(inner, deterministic=True)


# -- byte-level round trips ---------------------------------------------------------------


@pytest.mark.parametrize("case", CASES)
def test_official_bytes_parse_into_ours_and_serialize_identically(case: str) -> None:
    """An official message's bytes, parsed by our class and serialized again, are unchanged."""
    make_official, ours_class = CASES[case]
    data = wire(make_official())

    ours = ours_class.FromString(data)

    assert wire(ours) == data
    # Every field landed in a field of ours with the same name (none left unknown).
    assert text_format.MessageToString(ours) == text_format.MessageToString(make_official())


@pytest.mark.parametrize("case", CASES)
def test_our_bytes_parse_into_official_and_serialize_identically(case: str) -> None:
    """Our message, filled with the same content, gives the official bytes, which parse back."""
    make_official, ours_class = CASES[case]
    official = make_official()
    ours = text_format.Parse(text_format.MessageToString(official), ours_class())
    repack_anys_deterministically(ours)

    data = wire(ours)
    parsed = type(official).FromString(data)

    assert data == wire(official)
    assert parsed == official
    assert wire(parsed) == data


def test_metadata_any_with_tf_serving_type_url_unpacks_in_official_clients() -> None:
    """Our SignatureDefMap packed under TF Serving's type URL unpacks as the official class."""
    ours = get_model_metadata_pb2.GetModelMetadataResponse()
    signatures = get_model_metadata_pb2.SignatureDefMap.FromString(
        wire(official_signature_def_map())
    )
    ours.metadata["signature_def"].CopyFrom(
        any_pb2.Any(type_url=SIGNATURE_DEF_MAP_URL, value=wire(signatures))
    )

    official = tfs_get_model_metadata_pb2.GetModelMetadataResponse.FromString(wire(ours))
    unpacked = tfs_get_model_metadata_pb2.SignatureDefMap()

    assert official.metadata["signature_def"].Unpack(unpacked)
    assert unpacked == official_signature_def_map()


def official_with_left_out_fields() -> Iterator[
    tuple[pb_message.Message, type[pb_message.Message]]
]:
    """Official messages that set fields our protos leave out (reserved), with our class."""
    request = official_predict_request()
    request.client_id = b"client-7"
    request.request_options.max_cache_length = 128
    request.predict_streamed_options.return_single_response = True
    yield request, predict_pb2.PredictRequest

    resource = tf_tensor_pb2.TensorProto(dtype=tf_types_pb2.DT_RESOURCE)
    resource.resource_handle_val.add(device="/cpu:0", name="v")
    resource.variant_val.add(type_name="list")
    yield resource, tensor_pb2.TensorProto

    info = tf_meta_graph_pb2.TensorInfo(dtype=tf_types_pb2.DT_FLOAT)
    info.coo_sparse.values_tensor_name = "values:0"
    yield info, meta_graph_pb2.TensorInfo

    metadata = tfs_logging_pb2.LogMetadata(model_spec=official_model_spec())
    metadata.saved_model_tags.append("serve")
    metadata.timestamp_secs = 1_700_000_000
    metadata.sampling_config.sampling_rate = 0.5
    yield metadata, logging_pb2.LogMetadata

    session_log = tfs_prediction_log_pb2.PredictionLog()
    session_log.session_run_log.request.feed.add(name="x")
    yield session_log, prediction_log_pb2.PredictionLog


@pytest.mark.parametrize(
    ("official", "ours_class"),
    list(official_with_left_out_fields()),
    ids=lambda value: type(value).__name__ if isinstance(value, pb_message.Message) else "",
)
def test_fields_we_leave_out_survive_a_round_trip_through_ours(
    official: pb_message.Message, ours_class: type[pb_message.Message]
) -> None:
    """Fields of the official message that ours reserves are kept as unknown fields and re-sent."""
    ours = ours_class.FromString(wire(official))

    assert type(official).FromString(ours.SerializeToString()) == official


def test_a_session_run_log_parses_with_no_log_type() -> None:
    """A warmup record holding a SessionRun log (not implemented) parses with log_type unset."""
    official = tfs_prediction_log_pb2.PredictionLog()
    official.session_run_log.request.feed.add(name="x")

    ours = prediction_log_pb2.PredictionLog.FromString(wire(official))

    assert ours.WhichOneof("log_type") is None


def test_tensorflow_example_classes_read_our_examples() -> None:
    """tf.train.Example's own classes (feature_pb2) read an Example written by ours."""
    ours = example_pb2.Example.FromString(wire(official_example()))
    ours.features.feature["extra"].float_list.value.append(9.0)

    official = tf_example_pb2.Example.FromString(wire(ours))

    assert isinstance(official.features.feature["extra"], tf_feature_pb2.Feature)
    assert list(official.features.feature["extra"].float_list.value) == [9.0]


# -- descriptors --------------------------------------------------------------------------


def our_messages() -> list[descriptor.Descriptor]:
    """Every message type we define, nested ones (map entries included) too."""
    found: list[descriptor.Descriptor] = []

    def walk(message: descriptor.Descriptor) -> None:
        found.append(message)
        for nested in message.nested_types:
            walk(nested)

    for module in OUR_MODULES:
        for message in module.DESCRIPTOR.message_types_by_name.values():
            walk(message)
    return [m for m in found if not _is_extension(m)]


def _is_extension(message: descriptor.Descriptor) -> bool:
    while message is not None:
        if message.full_name in EXTENSION_MESSAGES:
            return True
        message = message.containing_type
    return False


def official_counterpart(ours: descriptor.Descriptor) -> descriptor.Descriptor:
    """The official message type of the same name, in tensorflow.serving or tensorflow."""
    name = ours.full_name.removeprefix(f"{OUR_PACKAGE}.")
    pool = descriptor_pool.Default()
    for package in ("tensorflow.serving", "tensorflow"):
        try:
            return pool.FindMessageTypeByName(f"{package}.{name}")
        except KeyError:
            continue
    raise AssertionError(f"no official message for {ours.full_name}")


def field_signature(field: descriptor.FieldDescriptor) -> tuple[object, ...]:
    """What decides a field's wire format and meaning, package names aside."""
    if field.message_type is not None:
        type_name = field.message_type.full_name.removeprefix(f"{OUR_PACKAGE}.")
        type_name = type_name.removeprefix("tensorflow.serving.").removeprefix("tensorflow.")
    elif field.enum_type is not None:
        type_name = field.enum_type.name
    else:
        type_name = ""
    oneof = field.containing_oneof.name if field.containing_oneof else None
    return (field.name, field.type, field.is_repeated, field.is_packed, type_name, oneof)


def reserved_numbers(message: descriptor.Descriptor) -> set[int]:
    proto = descriptor_pb2.DescriptorProto()
    message.CopyToProto(proto)
    return {n for span in proto.reserved_range for n in range(span.start, span.end)}


def test_every_message_has_an_official_counterpart() -> None:
    """We define no message that TF Serving or TensorFlow does not (the descriptors we check)."""
    messages = our_messages()

    assert len(messages) >= 40
    assert all(official_counterpart(message) is not None for message in messages)


@pytest.mark.parametrize("ours", our_messages(), ids=lambda message: message.full_name)
def test_fields_match_the_official_numbers_and_types(ours: descriptor.Descriptor) -> None:
    """Each of our fields has the official field's number, name, type, label and oneof."""
    official = official_counterpart(ours)

    for field in ours.fields:
        if (ours.full_name, field.number) in EXTENSION_FIELDS:
            assert field.number >= 1000
            continue
        assert field.number in official.fields_by_number, field.name
        assert field_signature(field) == field_signature(official.fields_by_number[field.number])


@pytest.mark.parametrize("ours", our_messages(), ids=lambda message: message.full_name)
def test_official_fields_we_leave_out_are_reserved(ours: descriptor.Descriptor) -> None:
    """Every official field we do not define has its number reserved in ours."""
    official = official_counterpart(ours)

    left_out = set(official.fields_by_number) - set(ours.fields_by_number)

    assert left_out <= reserved_numbers(ours)


def test_data_type_values_match_tensorflow() -> None:
    """Our DataType has TensorFlow's DT_* names and numbers 0..23."""
    ours = {value.name: value.number for value in tensor_pb2.DataType.DESCRIPTOR.values}
    official = {
        value.name: value.number
        for value in tf_types_pb2.DataType.DESCRIPTOR.values
        if value.number <= 23
    }

    assert ours == official


def test_both_descriptor_sets_live_in_one_pool() -> None:
    """Ours (servinglib.tfs, servinglib/protos/*.proto) and the official ones share a pool."""
    pool = descriptor_pool.Default()

    ours = pool.FindMessageTypeByName(f"{OUR_PACKAGE}.PredictRequest")
    official = pool.FindMessageTypeByName("tensorflow.serving.PredictRequest")

    assert ours is predict_pb2.PredictRequest.DESCRIPTOR
    assert ours.file.name == "servinglib/protos/predict.proto"
    assert official is tfs_predict_pb2.PredictRequest.DESCRIPTOR
    assert {module.DESCRIPTOR.package for module in OUR_MODULES} == {OUR_PACKAGE}
