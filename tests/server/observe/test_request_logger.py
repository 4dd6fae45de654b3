"""Request logging: sampled requests become TF Serving PredictionLog records in TFRecord files."""

from __future__ import annotations

import asyncio
import glob
import logging
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from tensorflow_serving.apis import (
    classification_pb2,
    inference_pb2,
    predict_pb2,
    prediction_log_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
)

from servinglib.codecs import make_example, read_records
from servinglib.examples import HALF_PLUS_TWO
from servinglib.server.config import ModelConfig, ModelServerConfig
from servinglib.server.logging_config import LoggingConfig
from servinglib.server.model_spec import ModelSpec
from servinglib.server.observe.log_sink import FileLogSink, FileRetention, FileRotation, LogSink
from servinglib.server.observe.request_logger import (
    DROPPED,
    LOGGED,
    NO_SINK,
    RequestLogger,
    RequestLogOptions,
)
from servinglib.server.plane.data_plane import DataPlane
from servinglib.server.server_core import ServerCore
from servinglib.testing import wait_until, write_python_model
from servinglib.testing._servers import LocalGrpcServer
from servinglib.testing.plugin import TEST_SERVER_CORE_OPTIONS

MODEL_PY = """
from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec

class Model(PythonModel):
    @signature(name="serving_default", inputs=[TensorSpec("x", "float32", [-1])],
               outputs=[TensorSpec("y", "float32", [-1])])
    def predict(self, x):
        return {"y": x * 2}
"""


def write_model(root: Path, version: int = 1) -> Path:
    """Version ``version`` of the Python model ``m`` under ``root``; its directory."""
    return write_python_model(root, "m", MODEL_PY, version=version) / str(version)


def logged_config(root: Path, rate: float, prefix: Path) -> ModelServerConfig:
    logging_config = LoggingConfig(sampling_rate=rate, filename_prefix=str(prefix))
    return ModelServerConfig(
        [ModelConfig("m", str(root / "m"), "python", logging_config=logging_config)]
    )


def logs_of(prefix: Path) -> list[prediction_log_pb2.PredictionLog]:
    """Every record of every file written under ``prefix``, parsed with TF Serving's protos."""
    found = []
    for path in sorted(glob.glob(f"{prefix}.*.tfrecord")):
        for record in read_records(path):
            log = prediction_log_pb2.PredictionLog()
            log.ParseFromString(record)
            found.append(log)
    return found


async def predict_many(plane: DataPlane, count: int) -> None:
    spec = ModelSpec.latest("m")
    await asyncio.gather(
        *(plane.infer(spec, None, {"x": np.full(2, i, np.float32)}) for i in range(count))
    )


@pytest.fixture
def prefix(tmp_path: Path) -> Path:
    return tmp_path / "logs" / "requests"


def test_every_request_is_logged_at_rate_one_under_load(tmp_path: Path, prefix: Path) -> None:
    """200 concurrent predictions at sampling 1.0 give 200 predict logs with their tensors."""
    write_model(tmp_path)
    with ServerCore(logged_config(tmp_path, 1.0, prefix), TEST_SERVER_CORE_OPTIONS) as core:
        plane = DataPlane(core, max_workers=2)
        asyncio.run(predict_many(plane, 200))
        plane.close()
        assert plane.request_logger.counts() == {("m", LOGGED): 200}
    logs = logs_of(prefix)
    assert len(logs) == 200
    assert {log.WhichOneof("log_type") for log in logs} == {"predict_log"}
    seen = set()
    for log in logs:
        request, response = log.predict_log.request, log.predict_log.response
        assert log.log_metadata.model_spec.name == request.model_spec.name == "m"
        assert request.model_spec.version.value == 1
        assert request.model_spec.signature_name == "serving_default"
        x = request.inputs["x"].float_val
        assert list(response.outputs["y"].float_val) == [2 * v for v in x]
        seen.add(x[0])
    assert seen == set(range(200))


def test_a_tenth_of_requests_is_logged_at_rate_one_tenth(tmp_path: Path, prefix: Path) -> None:
    """At sampling 0.1, 2000 predictions give about 200 records (within six deviations)."""
    write_model(tmp_path)
    with ServerCore(logged_config(tmp_path, 0.1, prefix), TEST_SERVER_CORE_OPTIONS) as core:
        plane = DataPlane(core, max_workers=2)
        asyncio.run(predict_many(plane, 2000))
        plane.close()
    assert 200 - 6 * 13.4 < len(logs_of(prefix)) < 200 + 6 * 13.4


def test_a_model_without_logging_config_writes_nothing(tmp_path: Path) -> None:
    """Requests of a model with no logging_config start no writer and count nothing."""
    write_model(tmp_path)
    config = ModelServerConfig([ModelConfig("m", str(tmp_path / "m"), "python")])
    with ServerCore(config, TEST_SERVER_CORE_OPTIONS) as core:
        plane = DataPlane(core, max_workers=2)
        asyncio.run(predict_many(plane, 5))
        plane.close()
        assert plane.request_logger.counts() == {}


def test_a_logged_file_is_a_warmup_file(tmp_path: Path, prefix: Path) -> None:
    """A request log copied to assets.extra/tf_serving_warmup_requests is replayed at load."""
    write_model(tmp_path)
    with ServerCore(logged_config(tmp_path, 1.0, prefix), TEST_SERVER_CORE_OPTIONS) as core:
        plane = DataPlane(core, max_workers=2)
        asyncio.run(predict_many(plane, 7))
        plane.close()
    (logged,) = glob.glob(f"{prefix}.*.tfrecord")
    version = write_model(tmp_path / "next")
    (version / "assets.extra").mkdir()
    shutil.copy(logged, version / "assets.extra" / "tf_serving_warmup_requests")
    config = ModelServerConfig([ModelConfig("m", str(tmp_path / "next" / "m"), "python")])
    records = logging.getLogger("servinglib.loaders.warmup")
    messages: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: messages.append(record.getMessage())  # type: ignore[method-assign]
    records.addHandler(handler)
    old_level = records.level
    records.setLevel(logging.INFO)
    try:
        with ServerCore(config, TEST_SERVER_CORE_OPTIONS) as core:
            assert core.ready()
    finally:
        records.removeHandler(handler)
        records.setLevel(old_level)
    assert any(message.startswith("replayed 7 warmup records") for message in messages)


class GatedSink(LogSink):
    """A sink whose writes wait for ``go``: a slow Kafka or HTTP collector."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.records: list[bytes] = []

    def write(self, record: bytes) -> None:
        self.records.append(record)
        self.go.wait(30)


def test_a_full_queue_drops_and_counts_without_blocking() -> None:
    """With the sink stuck, requests beyond the queue's bound are dropped, counted, not waited."""
    sink = GatedSink()
    config = LoggingConfig(sampling_rate=1.0, collector_type="slow")
    logger = RequestLogger(
        lambda _: config, RequestLogOptions(max_queued=2), sinks={"slow": lambda _: sink}
    )
    args = ("m", 1, "serving_default", {"x": np.ones(1, np.float32)}, {}, None)
    logger.log(config, "m", "predict", *args)
    wait_until(lambda: len(sink.records) == 1, timeout_s=10)  # the writer holds the first
    for _ in range(9):
        logger.log(config, "m", "predict", *args)  # returns at once although the sink waits
    assert logger.counts() == {("m", DROPPED): 7}
    sink.go.set()
    logger.close()
    assert logger.counts() == {("m", DROPPED): 7, ("m", LOGGED): 3}
    assert len(sink.records) == 3


def test_the_queue_is_bounded_in_bytes_and_drops_are_counted_and_warned_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """With the sink stuck, records past the byte bound are dropped, counted, and warned once."""
    sink = GatedSink()
    config = LoggingConfig(sampling_rate=1.0, collector_type="slow")
    options = RequestLogOptions(max_queued_bytes=10 << 20)  # two 4 MiB requests, not three
    logger = RequestLogger(lambda _: config, options, sinks={"slow": lambda _: sink})
    big = {"x": np.ones(1 << 20, np.float32)}
    args = ("m", 1, "serving_default", big, {}, None)
    logger.log(config, "m", "predict", *args)
    wait_until(lambda: len(sink.records) == 1, timeout_s=10)  # the one being written counts too
    with caplog.at_level(logging.WARNING, "servinglib.server.observe.request_logger"):
        for _ in range(9):
            logger.log(config, "m", "predict", *args)
    assert logger.counts() == {("m", DROPPED): 8}
    (warning,) = caplog.records
    assert warning.getMessage().startswith("Request log: 1 sampled request(s) dropped")
    assert "bounds 10000 requests, 10485760 bytes" in warning.getMessage()
    sink.go.set()
    logger.drain()
    logger.log(config, "m", "predict", *args)  # written records free their bytes
    logger.close()
    assert logger.counts() == {("m", DROPPED): 8, ("m", LOGGED): 3}


def test_a_record_larger_than_the_byte_bound_is_dropped() -> None:
    """A single request whose tensors alone pass the byte bound is never queued."""
    sink = GatedSink()
    sink.go.set()
    config = LoggingConfig(sampling_rate=1.0, collector_type="slow")
    options = RequestLogOptions(max_queued_bytes=1 << 20)
    logger = RequestLogger(lambda _: config, options, sinks={"slow": lambda _: sink})
    logger.log(config, "m", "predict", "m", 1, "s", {"x": np.ones(1 << 19, np.float32)}, {}, None)
    logger.close()
    assert logger.counts() == {("m", DROPPED): 1}


def test_an_unknown_collector_type_counts_its_records_as_not_found() -> None:
    """Records for a collector type nobody registered are counted, not written anywhere."""
    config = LoggingConfig(sampling_rate=1.0, collector_type="kafka")
    logger = RequestLogger(lambda _: config)
    logger.log(config, "m", "predict", "m", 1, "s", {}, {}, None)
    logger.close()
    assert logger.counts() == {("m", NO_SINK): 1}


def test_files_rotate_by_size_and_by_age(tmp_path: Path) -> None:
    """The file sink starts a new file past max_bytes or max_age_s; each file stays readable."""
    now = [1000.0]
    sink = FileLogSink(
        str(tmp_path / "r"), FileRotation(max_bytes=100, max_age_s=60), clock=lambda: now[0]
    )
    for index in range(5):
        sink.write(bytes([index]) * 40)  # 56 bytes framed: two per file
    now[0] += 61
    sink.write(b"late")
    sink.close()
    assert [len(list(read_records(path))) for path in sink.paths] == [2, 2, 1, 1]
    assert list(read_records(sink.paths[-1])) == [b"late"]


def test_the_oldest_files_past_max_files_are_deleted(tmp_path: Path) -> None:
    """With at most three files kept, the sink deletes the oldest as it starts new ones."""
    sink = FileLogSink(
        str(tmp_path / "r"),
        FileRotation(max_bytes=100),
        FileRetention(max_files=3),
    )
    for index in range(10):
        sink.write(bytes([index]) * 40)  # two records per file: five files in all
    sink.close()
    kept = sorted(glob.glob(str(tmp_path / "r.*.tfrecord")))
    assert kept == sink.paths
    assert [list(read_records(path)) for path in kept] == [
        [bytes([index]) * 40, bytes([index + 1]) * 40] for index in (4, 6, 8)
    ]


def test_the_oldest_files_past_max_total_bytes_are_deleted(tmp_path: Path) -> None:
    """The files kept, the one being written included, hold at most max_total_bytes."""
    sink = FileLogSink(
        str(tmp_path / "r"),
        FileRotation(max_bytes=100),
        FileRetention(max_total_bytes=250),  # two full files of 112 bytes, not three
    )
    for index in range(9):
        sink.write(bytes([index]) * 40)
        on_disk = glob.glob(str(tmp_path / "r.*.tfrecord"))
        assert sum(Path(path).stat().st_size for path in on_disk) <= 250
    sink.close()
    kept = sorted(glob.glob(str(tmp_path / "r.*.tfrecord")))
    assert [len(list(read_records(path))) for path in kept] == [2, 1]
    assert list(read_records(kept[-1])) == [bytes([8]) * 40]


@pytest.fixture
def half_plus_two_served(prefix: Path) -> Iterator[tuple[LocalGrpcServer, DataPlane]]:
    logging_config = LoggingConfig(sampling_rate=1.0, filename_prefix=str(prefix))
    model = ModelConfig("half_plus_two", str(HALF_PLUS_TWO), logging_config=logging_config)
    with ServerCore(ModelServerConfig([model]), TEST_SERVER_CORE_OPTIONS) as core:
        plane = DataPlane(core, max_workers=2)
        server = LocalGrpcServer(plane)  # type: ignore[arg-type]
        try:
            yield server, plane
        finally:
            server.close()
            plane.close()


def test_grpc_predict_classify_regress_and_multi_inference_are_logged(
    half_plus_two_served: tuple[LocalGrpcServer, DataPlane], prefix: Path
) -> None:
    """Each PredictionService RPC is logged as TF Serving's log of its kind, request and answer."""
    server, plane = half_plus_two_served
    stub = prediction_service_pb2_grpc.PredictionServiceStub(grpc.insecure_channel(server.target))
    predict = predict_pb2.PredictRequest()
    predict.model_spec.name = "half_plus_two"
    predict.inputs["x"].CopyFrom(_floats([1.0, 2.0]))
    stub.Predict(predict, timeout=30)
    example = make_example({"x": [4.0]}).SerializeToString()
    classify = classification_pb2.ClassificationRequest()
    classify.model_spec.name = "half_plus_two"
    classify.model_spec.signature_name = "classify_x_to_y"
    classify.input.example_list.examples.add().ParseFromString(example)
    stub.Classify(classify, timeout=30)
    regress = regression_pb2.RegressionRequest()
    regress.model_spec.name = "half_plus_two"
    regress.model_spec.signature_name = "regress_x_to_y"
    regress.input.CopyFrom(classify.input)
    stub.Regress(regress, timeout=30)
    multi = inference_pb2.MultiInferenceRequest()
    task = multi.tasks.add()
    task.model_spec.name = "half_plus_two"
    task.model_spec.signature_name = "regress_x_to_y"
    task.method_name = "tensorflow/serving/regress"
    multi.input.CopyFrom(classify.input)
    stub.MultiInference(multi, timeout=30)
    plane.request_logger.drain()
    logs = logs_of(prefix)
    assert [log.WhichOneof("log_type") for log in logs] == [
        "predict_log",
        "classify_log",
        "regress_log",
        "multi_inference_log",
    ]
    assert list(logs[0].predict_log.response.outputs["y"].float_val) == [3.5, 4.0]
    assert logs[1].classify_log.response.result.classifications[0].classes[0].score == 5.0
    assert logs[1].classify_log.request.input == classify.input
    assert logs[2].regress_log.response.result.regressions[0].value == 5.0
    assert logs[3].multi_inference_log.request == multi
    assert logs[3].multi_inference_log.response.results[0].regression_result.regressions[
        0
    ].value == pytest.approx(5.0)


def test_grpc_requests_past_the_byte_bound_are_dropped_not_queued(tmp_path: Path) -> None:
    """Over a real gRPC server with the sink stuck, 6 MiB records past 14 MiB are dropped."""
    write_model(tmp_path)
    sink = GatedSink()
    logging_config = LoggingConfig(sampling_rate=1.0, collector_type="slow")
    config = ModelServerConfig(
        [ModelConfig("m", str(tmp_path / "m"), "python", logging_config=logging_config)]
    )
    with ServerCore(config, TEST_SERVER_CORE_OPTIONS) as core:
        plane = DataPlane(
            core,
            max_workers=2,
            log_sinks={"slow": lambda _: sink},
            request_log=RequestLogOptions(max_queued_bytes=14 << 20),
        )
        server = LocalGrpcServer(plane)  # type: ignore[arg-type]
        try:
            stub = prediction_service_pb2_grpc.PredictionServiceStub(
                grpc.insecure_channel(server.target)
            )
            request = predict_pb2.PredictRequest()
            request.model_spec.name = "m"
            request.inputs["x"].dtype = 1
            elements = (3 << 20) // 4
            request.inputs["x"].tensor_shape.dim.add().size = elements
            request.inputs["x"].tensor_content = np.ones(elements, np.float32).tobytes()
            for _ in range(6):  # 3 MiB in and 3 MiB out each: two fit in 14 MiB
                stub.Predict(request, timeout=30)
            assert plane.request_logger.counts() == {("m", DROPPED): 4}
        finally:
            sink.go.set()
            server.close()
            plane.close()
    assert plane.request_logger.counts() == {("m", DROPPED): 4, ("m", LOGGED): 2}


def _floats(values: list[float]) -> object:
    from tensorflow.core.framework import tensor_pb2

    proto = tensor_pb2.TensorProto(dtype=1, float_val=values)
    proto.tensor_shape.dim.add().size = len(values)
    return proto


def test_a_v2_rest_inference_is_logged_as_a_tf_serving_predict_log(
    tmp_path: Path, prefix: Path
) -> None:
    """KServe V2 /infer over REST is recorded as its TF Serving equivalent, a predict_log."""
    import httpx

    from servinglib.server.rest import RestOptions, create_app

    write_model(tmp_path)
    with ServerCore(logged_config(tmp_path, 1.0, prefix), TEST_SERVER_CORE_OPTIONS) as core:
        plane = DataPlane(core, max_workers=2)
        app = create_app(plane, RestOptions())

        async def infer() -> httpx.Response:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://rest") as client:
                body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [2], "data": [1, 2]}]}
                return await client.post("/v2/models/m/infer", json=body)

        answer = asyncio.run(infer())
        assert answer.status_code == 200, answer.text
        plane.close()
    (log,) = logs_of(prefix)
    assert log.WhichOneof("log_type") == "predict_log"
    assert list(log.predict_log.request.inputs["x"].float_val) == [1.0, 2.0]
    assert list(log.predict_log.response.outputs["y"].float_val) == [2.0, 4.0]


def test_a_logged_v2_request_records_its_parameters_and_forwarded_headers_not_credentials(
    tmp_path: Path, prefix: Path
) -> None:
    """The record's metadata holds the request's id, its parameters and the forwarded headers;
    neither a restricted group's credential nor a usual credential header is in its bytes."""
    import httpx

    from servinglib.protos import prediction_log_pb2 as our_prediction_log_pb2
    from servinglib.server.auth.restricted_apis import RestrictedApis
    from servinglib.server.header_forwarding import HeaderForwarding
    from servinglib.server.rest import RestOptions, create_app

    restricted = RestrictedApis.http(["inference:x-token=group-secret"])
    forwarding = HeaderForwarding(".*", withheld=[r.key for r in restricted.restrictions])
    write_model(tmp_path)
    with ServerCore(logged_config(tmp_path, 1.0, prefix), TEST_SERVER_CORE_OPTIONS) as core:
        plane = DataPlane(core, max_workers=2)
        app = create_app(
            plane, RestOptions(restricted_apis=restricted, header_forwarding=forwarding)
        )

        async def infer() -> httpx.Response:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://rest") as client:
                body = {
                    "id": "req-7",
                    "parameters": {"p": 3, "flag": True, "sequence_id": 0},
                    "inputs": [{"name": "x", "datatype": "FP32", "shape": [1], "data": [1]}],
                }
                headers = {
                    "x-token": "group-secret",
                    "authorization": "Bearer other-secret",
                    "x-tenant": "gold",
                    "x-request-id": "rid-1",
                }
                return await client.post("/v2/models/m/infer", json=body, headers=headers)

        answer = asyncio.run(infer())
        assert answer.status_code == 200, answer.text
        plane.close()
    (record,) = [r for path in glob.glob(f"{prefix}.*.tfrecord") for r in read_records(path)]
    metadata = our_prediction_log_pb2.PredictionLog.FromString(record).log_metadata
    parameters = {
        name: getattr(value, value.WhichOneof("value"))
        for name, value in metadata.request_parameters.items()
    }
    assert metadata.request_id == "rid-1"
    assert {"p": 3, "flag": True, "x-tenant": "gold"}.items() <= parameters.items()
    assert "sequence_id" not in parameters
    assert b"secret" not in bytes(record)
